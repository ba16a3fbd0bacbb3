//! Entry points shared by the cargo-fuzz targets in `fuzz/` and the stable-toolchain replay test
//! in `core/tests/fuzz_replay.rs`, so CI exercises exactly what the fuzzers run.
//!
//! Each takes arbitrary bytes and checks the properties that must hold for any input, panicking
//! (which a fuzzer reports) only when one is violated.

use bytes::{Bytes, BytesMut};

use crate::config::{BrokerConfig, ConsumerConfig, ProducerConfig, Properties};
use crate::message::{validate_set, DeepIter, ShallowIter, ValidationLimits};
use crate::wire::{Request, RequestDecoder, Response, ResponseDecoder, ResponseKind};

/// Largest frame the fuzz targets accept: small, so that lengths near it are reachable.
const FUZZ_FRAME_BYTES_MAX: usize = 64 * 1024;
/// Decompression bound for fuzzing: small, so bombs are caught quickly.
const FUZZ_DECOMPRESSED_BYTES_MAX: usize = 1024 * 1024;

/// Decodes a stream of request frames. Every decoded request must re-encode to exactly the
/// bytes it came from (the 0.7 encoding is canonical).
pub fn request_stream(data: &[u8]) {
    let decoder = RequestDecoder::new(FUZZ_FRAME_BYTES_MAX);
    let mut buf = BytesMut::from(data);
    let mut consumed = 0;
    while let Ok(Some(request)) = decoder.decode(&mut buf) {
        let frame_len = data.len() - buf.len() - consumed;
        let original = data.get(consumed..consumed + frame_len);
        let encoded = request.to_bytes().ok();
        assert_eq!(encoded.as_deref(), original, "request did not re-encode to its own bytes");
        consumed += frame_len;
    }
}

/// Decodes one response frame as each kind. A decoded response must re-encode to its bytes.
pub fn response_frame(data: &[u8]) {
    let decoder = ResponseDecoder::new(FUZZ_FRAME_BYTES_MAX);
    for kind in [ResponseKind::Fetch, ResponseKind::MultiFetch, ResponseKind::Offsets] {
        let mut buf = BytesMut::from(data);
        if let Ok(Some(response)) = decoder.decode(kind, &mut buf) {
            let used = data.len() - buf.len();
            assert_eq!(response.to_bytes().ok().as_deref(), data.get(..used), "{kind:?} re-encode");
        }
        let _ = Response::decode(kind, &Bytes::copy_from_slice(data));
    }
    let _ = Request::decode(&Bytes::copy_from_slice(data));
}

/// Iterates a message set shallow and deep and validates it. Offsets must increase, valid and
/// trailing bytes must add up, and a set that validates must iterate without error.
pub fn message_set(data: &[u8]) {
    let base = 1_000;
    let mut shallow = ShallowIter::new(data, base);
    let mut last = base;
    let mut failed = false;
    for entry in shallow.by_ref() {
        match entry {
            Ok(e) => {
                assert!(e.offset == last && e.next_offset > e.offset, "shallow offsets out of order");
                last = e.next_offset;
            }
            Err(_) => failed = true,
        }
    }
    if !failed {
        let end = shallow.end();
        assert_eq!(end.valid_bytes + end.trailing_bytes, data.len());
    }
    let set = Bytes::copy_from_slice(data);
    let mut previous = base;
    for entry in DeepIter::new(set.clone(), base, FUZZ_DECOMPRESSED_BYTES_MAX).flatten() {
        assert!(entry.offset >= previous && entry.next_offset >= entry.offset, "deep offsets out of order");
        previous = entry.offset;
    }
    let limits = ValidationLimits { decompressed_bytes_max: FUZZ_DECOMPRESSED_BYTES_MAX, ..Default::default() };
    if let Ok(summary) = validate_set(&set, limits) {
        let deep = DeepIter::new(set, 0, FUZZ_DECOMPRESSED_BYTES_MAX);
        assert_eq!(deep.map(|e| e.map(drop)).collect::<Result<Vec<_>, _>>().map(|v| v.len()), Ok(summary.messages));
    }
}

/// Parses `.properties` bytes and reads them as every typed configuration.
pub fn properties(data: &[u8]) {
    let Ok(props) = Properties::parse_bytes("fuzz.properties", data) else {
        return;
    };
    let _ = BrokerConfig::from_properties(&props);
    let _ = ProducerConfig::from_properties(&props);
    let _ = ConsumerConfig::from_properties(&props);
}
