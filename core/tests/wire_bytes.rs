//! The exact bytes of every request, response and message kind.
//!
//! Hand-computed vectors pin the 0.7 layouts independently of our encoder; the `insta` snapshots
//! make any change to the encoded bytes show up in review.

mod common;

use bytes::Bytes;
use common::hex;
use tributary_core::message::{CompressionCodec, Magic, Message, MessageSetBuilder};
use tributary_core::wire::{
    ErrorCode, FetchRequest, FetchResponse, MultiFetchResponse, OffsetsRequest, OffsetsResponse,
    ProduceRequest, Request, Response, TopicName,
};

fn topic(name: &str) -> TopicName {
    name.parse().unwrap()
}

fn fetch(name: &str, partition: i32, offset: i64) -> FetchRequest {
    FetchRequest {
        topic: topic(name),
        partition,
        offset,
        max_bytes: 1_048_576,
    }
}

fn hello_set() -> Bytes {
    let mut b = MessageSetBuilder::new();
    b.push(&b"hello"[..]);
    b.build(CompressionCodec::None)
}

#[test]
fn magic1_message_matches_hand_computed_bytes() {
    // length 11 = magic + attributes + crc + 5, magic 1, codec 0, crc32("hello") = 0x3610a686.
    let expected = [
        0, 0, 0, 11, 1, 0, 0x36, 0x10, 0xa6, 0x86, b'h', b'e', b'l', b'l', b'o',
    ];
    assert_eq!(&hello_set()[..], &expected[..]);
}

#[test]
fn magic0_message_matches_hand_computed_bytes() {
    let mut b = MessageSetBuilder::new();
    b.push_message(&Message::with_codec(
        Magic::V0,
        CompressionCodec::None,
        &b"hello"[..],
    ));
    let expected = [
        0, 0, 0, 10, 0, 0x36, 0x10, 0xa6, 0x86, b'h', b'e', b'l', b'l', b'o',
    ];
    assert_eq!(&b.build(CompressionCodec::None)[..], &expected[..]);
}

#[test]
fn fetch_request_matches_hand_computed_bytes() {
    let bytes = Request::Fetch(fetch("test", 0, 0)).to_bytes().unwrap();
    let mut expected = vec![0, 0, 0, 24, 0, 1, 0, 4, b't', b'e', b's', b't', 0, 0, 0, 0];
    expected.extend_from_slice(&[0; 8]);
    expected.extend_from_slice(&[0, 0x10, 0, 0]);
    assert_eq!(&bytes[..], &expected[..]);
}

#[test]
fn produce_request_matches_hand_computed_bytes() {
    let set = hello_set();
    let request = Request::Produce(ProduceRequest {
        topic: topic("t"),
        partition: -1,
        messages: set.clone(),
    });
    let mut expected = vec![
        0,
        0,
        0,
        2 + 2 + 1 + 4 + 4 + 15,
        0,
        0,
        0,
        1,
        b't',
        0xff,
        0xff,
        0xff,
        0xff,
        0,
        0,
        0,
        15,
    ];
    expected.extend_from_slice(&set);
    assert_eq!(&request.to_bytes().unwrap()[..], &expected[..]);
}

#[test]
fn offsets_response_matches_hand_computed_bytes() {
    let response = Response::Offsets(OffsetsResponse {
        error: ErrorCode::NoError,
        offsets: vec![300, 0],
    });
    let mut expected = vec![0, 0, 0, 22, 0, 0, 0, 0, 0, 2];
    expected.extend_from_slice(&300i64.to_be_bytes());
    expected.extend_from_slice(&0i64.to_be_bytes());
    assert_eq!(&response.to_bytes().unwrap()[..], &expected[..]);
}

#[test]
fn request_frames_are_stable() {
    let set = hello_set();
    let produce = |t: &str, p| ProduceRequest {
        topic: topic(t),
        partition: p,
        messages: set.clone(),
    };
    insta::assert_snapshot!(
        "produce",
        hex(&Request::Produce(produce("test", 0)).to_bytes().unwrap())
    );
    insta::assert_snapshot!(
        "fetch",
        hex(&Request::Fetch(fetch("test", 3, 1234)).to_bytes().unwrap())
    );
    insta::assert_snapshot!(
        "multifetch",
        hex(
            &Request::MultiFetch(vec![fetch("a", 0, 0), fetch("b-2", 1, 99)])
                .to_bytes()
                .unwrap()
        )
    );
    insta::assert_snapshot!(
        "multiproduce",
        hex(
            &Request::MultiProduce(vec![produce("a", 0), produce("b", -1)])
                .to_bytes()
                .unwrap()
        )
    );
    let offsets = OffsetsRequest {
        topic: topic("test"),
        partition: 0,
        time: -2,
        max_offsets: 10,
    };
    insta::assert_snapshot!(
        "offsets",
        hex(&Request::Offsets(offsets).to_bytes().unwrap())
    );
}

#[test]
fn response_frames_are_stable() {
    let set = hello_set();
    let ok = FetchResponse {
        error: ErrorCode::NoError,
        messages: set.clone(),
    };
    let out_of_range = FetchResponse {
        error: ErrorCode::OffsetOutOfRange,
        messages: Bytes::new(),
    };
    insta::assert_snapshot!(
        "fetch_response",
        hex(&Response::Fetch(ok.clone()).to_bytes().unwrap())
    );
    insta::assert_snapshot!(
        "fetch_response_error",
        hex(&Response::Fetch(out_of_range.clone()).to_bytes().unwrap())
    );
    let multi = MultiFetchResponse {
        error: ErrorCode::NoError,
        blocks: vec![ok, out_of_range],
    };
    insta::assert_snapshot!(
        "multifetch_response",
        hex(&Response::MultiFetch(multi).to_bytes().unwrap())
    );
    let offsets = OffsetsResponse {
        error: ErrorCode::NoError,
        offsets: vec![4096, 2048, 0],
    };
    insta::assert_snapshot!(
        "offsets_response",
        hex(&Response::Offsets(offsets).to_bytes().unwrap())
    );
}

#[test]
fn message_encodings_of_each_codec_are_stable() {
    let mut b = MessageSetBuilder::new();
    b.push(&b"first message"[..]).push(&b"second message"[..]);
    insta::assert_snapshot!("set_uncompressed", hex(&b.build(CompressionCodec::None)));
    insta::assert_snapshot!("set_gzip", hex(&b.build(CompressionCodec::Gzip)));
    insta::assert_snapshot!("set_snappy", hex(&b.build(CompressionCodec::Snappy)));
    let v0 = Message::with_codec(Magic::V0, CompressionCodec::None, &b"legacy"[..]);
    let mut out = bytes::BytesMut::new();
    v0.encode(&mut out);
    insta::assert_snapshot!("message_magic0", hex(&out));
}

#[test]
fn error_codes_map_to_the_0_7_table_and_keep_unknown_codes() {
    let table = [
        (-1, ErrorCode::Unknown),
        (0, ErrorCode::NoError),
        (1, ErrorCode::OffsetOutOfRange),
        (2, ErrorCode::InvalidMessage),
        (3, ErrorCode::WrongPartition),
        (4, ErrorCode::InvalidFetchSize),
    ];
    for (code, expected) in table {
        assert_eq!(ErrorCode::from_code(code), expected);
        assert_eq!(expected.code(), code);
    }
    for code in [i16::MIN, -2, 5, 9, i16::MAX] {
        assert_eq!(ErrorCode::from_code(code), ErrorCode::Other(code));
        assert_eq!(ErrorCode::from_code(code).code(), code);
    }
}

#[test]
fn acked_produce_request_and_response_match_hand_computed_bytes() {
    // Request: MULTIPRODUCE's body under type 100.
    let set = hello_set();
    let request = Request::AckedProduce(vec![ProduceRequest {
        topic: topic("t"),
        partition: 1,
        messages: set.clone(),
    }]);
    let mut expected = vec![
        0,
        0,
        0,
        2 + 2 + 2 + 1 + 4 + 4 + 15,
        0,
        100,
        0,
        1,
        0,
        1,
        b't',
        0,
        0,
        0,
        1,
        0,
        0,
        0,
        15,
    ];
    expected.extend_from_slice(&set);
    assert_eq!(&request.to_bytes().unwrap()[..], &expected[..]);
    assert_eq!(
        Request::decode(&Bytes::copy_from_slice(&expected[4..])).unwrap(),
        request
    );

    // Response: size, error 0, count 2, {error 0, offset 4096}, {error 2, offset -1}.
    let response = Response::AckedProduce(tributary_core::wire::AckedProduceResponse {
        error: ErrorCode::NoError,
        acks: vec![
            tributary_core::wire::ProduceAck {
                error: ErrorCode::NoError,
                offset: 4096,
            },
            tributary_core::wire::ProduceAck {
                error: ErrorCode::InvalidMessage,
                offset: -1,
            },
        ],
    });
    let expected = [
        0, 0, 0, 24, 0, 0, 0, 2, //
        0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, //
        0, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    ];
    assert_eq!(&response.to_bytes().unwrap()[..], &expected[..]);
    let decoded = Response::decode(
        tributary_core::wire::ResponseKind::AckedProduce,
        &Bytes::copy_from_slice(&expected[4..]),
    )
    .unwrap();
    assert_eq!(decoded, response);
}
