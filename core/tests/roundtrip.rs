//! Seeded round trips: encode → decode → equal, for requests, responses and message sets.

mod common;

use bytes::BytesMut;
use common::*;
use tributary_core::message::{
    CompressionCodec, DeepIter, ShallowIter, DECOMPRESSED_BYTES_MAX_DEFAULT,
};
use tributary_core::wire::{RequestDecoder, ResponseDecoder, REQUEST_BYTES_MAX_DEFAULT};

const CASES: u64 = 2000;

#[test]
fn requests_round_trip_through_the_frame_decoder() {
    let decoder = RequestDecoder::new(REQUEST_BYTES_MAX_DEFAULT);
    for seed in 0..CASES {
        let mut rng = rng(seed);
        let request = request(&mut rng);
        let mut buf = BytesMut::from(&request.to_bytes().unwrap()[..]);
        let decoded = decoder
            .decode(&mut buf)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(decoded.as_ref(), Some(&request), "seed {seed}");
        assert!(
            buf.is_empty(),
            "seed {seed}: decoder left {} bytes",
            buf.len()
        );
    }
}

#[test]
fn a_request_carrying_message_sets_is_never_longer_than_its_bound() {
    use tributary_core::wire::Request;
    let mut checked = 0;
    for seed in 0..CASES {
        let mut rng = rng(seed);
        let request = request(&mut rng);
        let carries_sets = matches!(
            request,
            Request::Produce(_)
                | Request::MultiProduce(_)
                | Request::AckedProduce(_)
                | Request::MirrorProduce(_)
        );
        if !carries_sets {
            continue;
        }
        checked += 1;
        let (len, bound) = (
            request.to_bytes().unwrap().len(),
            request.encoded_len_bound(),
        );
        assert!(
            len <= bound,
            "seed {seed}: {len} bytes encoded past the bound of {bound}: to_bytes would grow and copy its buffer"
        );
    }
    assert!(checked > CASES / 4, "only {checked} requests carried sets");
}

#[test]
fn back_to_back_requests_decode_in_order() {
    let decoder = RequestDecoder::new(REQUEST_BYTES_MAX_DEFAULT);
    let mut rng = rng(7);
    let requests: Vec<_> = (0..50).map(|_| request(&mut rng)).collect();
    let mut buf = BytesMut::new();
    requests.iter().for_each(|r| r.encode(&mut buf).unwrap());
    for expected in &requests {
        assert_eq!(decoder.decode(&mut buf).unwrap().as_ref(), Some(expected));
    }
    assert_eq!(decoder.decode(&mut buf).unwrap(), None);
}

#[test]
fn responses_round_trip_through_the_frame_decoder() {
    let decoder = ResponseDecoder::new(REQUEST_BYTES_MAX_DEFAULT);
    for seed in 0..CASES {
        let mut rng = rng(seed);
        let response = response(&mut rng);
        let mut buf = BytesMut::from(&response.to_bytes().unwrap()[..]);
        let decoded = decoder
            .decode(response.kind(), &mut buf)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(decoded.as_ref(), Some(&response), "seed {seed}");
        assert!(buf.is_empty());
    }
}

#[test]
fn message_sets_round_trip_through_deep_iteration() {
    for seed in 0..CASES {
        let mut rng = rng(seed);
        let codec = codec(&mut rng);
        let (messages, set) = message_set(&mut rng, codec);
        let base = rng_offset(seed);
        let decoded: Vec<_> = DeepIter::new(set.clone(), base, DECOMPRESSED_BYTES_MAX_DEFAULT)
            .map(|e| e.unwrap_or_else(|e| panic!("seed {seed}: {e}")).message)
            .collect();
        assert_eq!(decoded, messages, "seed {seed} codec {codec}");
        let mut shallow = ShallowIter::new(&set, base);
        let top = shallow.by_ref().count();
        assert_eq!(shallow.end().valid_bytes, set.len(), "seed {seed}");
        let expected_top = if codec == CompressionCodec::None {
            messages.len()
        } else {
            usize::from(!messages.is_empty())
        };
        assert_eq!(top, expected_top, "seed {seed}");
    }
}

fn rng_offset(seed: u64) -> i64 {
    (seed * 7919) as i64
}
