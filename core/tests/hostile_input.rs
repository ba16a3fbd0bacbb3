//! Hostile bytes: every truncation point of valid frames, random byte flips, absurd lengths.
//! Each must yield "need more bytes" or a typed error, never a panic.

mod common;

use bytes::BytesMut;
use common::*;
use rand::Rng;
use tributary_core::message::{validate_set, DeepIter, ShallowIter, ValidationLimits};
use tributary_core::wire::{
    DecodeError, Request, RequestDecoder, Response, ResponseDecoder, ResponseKind, TopicError,
    REQUEST_BYTES_MAX_DEFAULT,
};

const CASES: u64 = 1500;

fn decode_all_requests(bytes: &[u8]) -> Result<Vec<Request>, DecodeError> {
    let decoder = RequestDecoder::new(REQUEST_BYTES_MAX_DEFAULT);
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(r) = decoder.decode(&mut buf)? {
        out.push(r);
    }
    Ok(out)
}

#[test]
fn every_truncation_of_a_request_frame_is_incomplete() {
    let decoder = RequestDecoder::new(REQUEST_BYTES_MAX_DEFAULT);
    for seed in 0..300 {
        let frame = request(&mut rng(seed)).to_bytes().unwrap();
        for cut in 0..frame.len() {
            let mut buf = BytesMut::from(&frame[..cut]);
            assert_eq!(decoder.decode(&mut buf), Ok(None), "seed {seed} cut {cut}");
            assert_eq!(buf.len(), cut, "an incomplete frame must not be consumed");
        }
    }
}

#[test]
fn every_truncation_inside_a_request_body_is_a_typed_error() {
    // Shrink the body but fix up the size prefix, so the frame is complete yet its fields are cut.
    for seed in 0..300 {
        let frame = request(&mut rng(seed)).to_bytes().unwrap();
        for body_len in 0..frame.len() - 4 {
            let mut bytes = ((body_len) as i32).to_be_bytes().to_vec();
            bytes.extend_from_slice(&frame[4..4 + body_len]);
            match decode_all_requests(&bytes) {
                Err(_) => {}
                // A shorter MULTIFETCH/MULTIPRODUCE can't be valid: counts are checked exactly.
                Ok(found) => {
                    panic!("seed {seed} body {body_len}: decoded {found:?} from a cut frame")
                }
            }
        }
    }
}

#[test]
fn every_truncation_of_a_response_is_incomplete_or_an_error() {
    let decoder = ResponseDecoder::new(REQUEST_BYTES_MAX_DEFAULT);
    for seed in 0..300 {
        let response = response(&mut rng(seed));
        let frame = response.to_bytes().unwrap();
        for cut in 0..frame.len() {
            let mut buf = BytesMut::from(&frame[..cut]);
            assert_eq!(
                decoder.decode(response.kind(), &mut buf),
                Ok(None),
                "seed {seed} cut {cut}"
            );
        }
        for body_len in 0..frame.len() - 4 {
            let mut bytes = ((body_len) as i32).to_be_bytes().to_vec();
            bytes.extend_from_slice(&frame[4..4 + body_len]);
            let decoded = decoder.decode(response.kind(), &mut BytesMut::from(&bytes[..]));
            check_cut_response(&response, body_len, decoded, seed);
        }
    }
}

/// What a response whose body was cut to `body_len` bytes (size prefix fixed up) must decode
/// to: FETCH bodies are raw bytes, so the cut is a valid response holding the prefix; an OFFSETS
/// count then lies, always an error; a MULTIFETCH cut exactly between blocks is a valid response
/// with the blocks before the cut, anywhere else an error.
fn check_cut_response(
    original: &Response,
    body_len: usize,
    decoded: Result<Option<Response>, DecodeError>,
    seed: u64,
) {
    let context = format!("seed {seed}, body cut to {body_len} bytes");
    if body_len < 2 {
        assert!(
            decoded.is_err(),
            "{context}: no error code, yet {decoded:?}"
        );
        return;
    }
    match original {
        Response::Fetch(f) => match decoded {
            Ok(Some(Response::Fetch(cut))) => {
                assert_eq!(cut.messages, f.messages.slice(..body_len - 2), "{context}")
            }
            other => panic!("{context}: a cut FETCH body is a shorter valid one, got {other:?}"),
        },
        Response::Offsets(_)
        | Response::AckedProduce(_)
        | Response::ClusterIdentity(_)
        | Response::TopicOrigins(_)
        | Response::MirrorProduce(_)
        | Response::MirrorPositions(_) => {
            assert!(
                decoded.is_err(),
                "{context}: a cut OFFSETS/ACKED_PRODUCE/CLUSTER_IDENTITY/TOPIC_ORIGINS body must be refused, got {decoded:?}"
            )
        }
        Response::MultiFetch(m) => {
            let mut boundary = 2;
            let mut whole_blocks = None;
            for (i, block) in m.blocks.iter().enumerate() {
                if boundary == body_len {
                    whole_blocks = Some(i);
                }
                boundary += 6 + block.messages.len();
            }
            match (whole_blocks, decoded) {
                (Some(n), Ok(Some(Response::MultiFetch(cut)))) => {
                    assert_eq!(cut.blocks, m.blocks[..n], "{context}")
                }
                (None, Err(_)) => {}
                (expected, got) => {
                    panic!("{context}: expected {expected:?} whole blocks, got {got:?}")
                }
            }
        }
    }
}

#[test]
fn random_byte_flips_never_panic() {
    for seed in 0..CASES {
        let mut rng = rng(seed);
        let mut frame = request(&mut rng).to_bytes().unwrap().to_vec();
        for _ in 0..rng.random_range(1..6) {
            let i = rng.random_range(0..frame.len());
            frame[i] ^= 1 << rng.random_range(0..8);
        }
        let _ = decode_all_requests(&frame);
        let body = bytes::Bytes::copy_from_slice(&frame[4..]);
        let _ = Request::decode(&body);
        for kind in [
            ResponseKind::Fetch,
            ResponseKind::MultiFetch,
            ResponseKind::Offsets,
        ] {
            let _ = Response::decode(kind, &body);
        }
        let set = bytes::Bytes::from(frame);
        let _ = validate_set(&set, ValidationLimits::default());
        let _ = ShallowIter::new(&set, 0).count();
        let _ = DeepIter::new(set, 0, 1 << 20).count();
    }
}

#[test]
fn random_garbage_never_panics() {
    for seed in 0..CASES {
        let mut rng = rng(seed);
        let len = rng.random_range(0..200);
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes[..]);
        let _ = decode_all_requests(&bytes);
        let set = bytes::Bytes::from(bytes);
        let _ = DeepIter::new(set.clone(), 0, 1 << 20).count();
        let _ = Response::decode(ResponseKind::MultiFetch, &set);
        let _ = Response::decode(ResponseKind::Offsets, &set);
    }
}

#[test]
fn oversize_frame_is_refused_from_its_prefix_alone() {
    let decoder = RequestDecoder::new(1024);
    let mut buf = BytesMut::from(&0x7fff_ffffi32.to_be_bytes()[..]);
    assert_eq!(
        decoder.decode(&mut buf),
        Err(DecodeError::FrameTooLarge {
            declared: i32::MAX,
            max: 1024
        })
    );
    let mut buf = BytesMut::from(&1025i32.to_be_bytes()[..]);
    assert!(matches!(
        decoder.decode(&mut buf),
        Err(DecodeError::FrameTooLarge { .. })
    ));
    let mut buf = BytesMut::from(&1024i32.to_be_bytes()[..]);
    assert_eq!(
        decoder.decode(&mut buf),
        Ok(None),
        "a frame at the limit waits for its bytes"
    );
}

#[test]
fn negative_zero_and_tiny_frame_sizes_are_invalid() {
    let decoder = RequestDecoder::new(REQUEST_BYTES_MAX_DEFAULT);
    for size in [i32::MIN, -1, 0, 1] {
        let mut buf = BytesMut::from(&size.to_be_bytes()[..]);
        assert!(
            matches!(decoder.decode(&mut buf), Err(DecodeError::FrameSizeInvalid { declared, .. }) if declared == size),
            "size {size}"
        );
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn fetch_body(topic: &[u8]) -> Vec<u8> {
    let mut body = vec![0, 1];
    body.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    body.extend_from_slice(topic);
    body.extend_from_slice(&[0; 4 + 8]);
    body.extend_from_slice(&1000i32.to_be_bytes());
    body
}

#[test]
fn each_malformation_has_its_own_error() {
    assert_eq!(
        decode_all_requests(&frame(&[0, 9])),
        Err(DecodeError::UnknownRequestType(9))
    );
    let mut trailing = fetch_body(b"t");
    trailing.push(0);
    assert_eq!(
        decode_all_requests(&frame(&trailing)),
        Err(DecodeError::TrailingBytes {
            context: "request",
            extra: 1
        })
    );
    let mut negative_topic = vec![0, 1, 0xff, 0xff];
    negative_topic.extend_from_slice(&[0; 16]);
    assert!(matches!(
        decode_all_requests(&frame(&negative_topic)),
        Err(DecodeError::NegativeLength { field: "topic", .. })
    ));
    let short_topic = [0, 1, 0, 50, b'a'];
    assert!(matches!(
        decode_all_requests(&frame(&short_topic)),
        Err(DecodeError::Truncated { field: "topic", .. })
    ));
    let negative_count = [0, 2, 0xff, 0xff];
    assert!(matches!(
        decode_all_requests(&frame(&negative_count)),
        Err(DecodeError::CountInvalid { .. })
    ));
    let huge_count = [0, 2, 0x7f, 0xff];
    assert!(matches!(
        decode_all_requests(&frame(&huge_count)),
        Err(DecodeError::Truncated {
            field: "multifetch",
            ..
        })
    ));
    let mut negative_set = vec![0, 0, 0, 1, b't', 0, 0, 0, 0];
    negative_set.extend_from_slice(&(-5i32).to_be_bytes());
    assert!(matches!(
        decode_all_requests(&frame(&negative_set)),
        Err(DecodeError::NegativeLength {
            field: "message set size",
            value: -5
        })
    ));
}

#[test]
fn invalid_topic_names_are_refused_before_any_use() {
    let long = vec![b'a'; 300];
    let cases: [(&[u8], TopicError); 5] = [
        (
            b"../x",
            TopicError::BadByte {
                byte: b'/',
                position: 2,
            },
        ),
        (b"", TopicError::Empty),
        (&long, TopicError::TooLong(300)),
        (b"..", TopicError::DotName),
        (
            b"a b",
            TopicError::BadByte {
                byte: b' ',
                position: 1,
            },
        ),
    ];
    for (topic, expected) in cases {
        assert_eq!(
            decode_all_requests(&frame(&fetch_body(topic))),
            Err(DecodeError::InvalidTopic(expected))
        );
    }
    // 249 bytes is the longest name (its `<topic>-<partition>` directories fit 255 bytes).
    assert!(decode_all_requests(&frame(&fetch_body(&[b'a'; 249]))).is_ok());
    assert_eq!(
        decode_all_requests(&frame(&fetch_body(&[b'a'; 250]))),
        Err(DecodeError::InvalidTopic(TopicError::TooLong(250)))
    );
    assert!(decode_all_requests(&frame(&fetch_body(b"my.topic_name-1"))).is_ok());
}

#[test]
fn offsets_response_with_lying_count_is_refused_without_allocating() {
    let mut body = vec![0, 0];
    body.extend_from_slice(&i32::MAX.to_be_bytes());
    let body = bytes::Bytes::from(body);
    assert!(matches!(
        Response::decode(ResponseKind::Offsets, &body),
        Err(DecodeError::CountInvalid { .. })
    ));
}

#[test]
fn a_limit_below_the_header_refuses_every_frame_without_panicking() {
    let decoder = RequestDecoder::new(1);
    let frame = request(&mut rng(1)).to_bytes().unwrap();
    assert!(matches!(
        decoder.decode(&mut BytesMut::from(&frame[..])),
        Err(DecodeError::FrameTooLarge { max: 1, .. })
    ));
}
