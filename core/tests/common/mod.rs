//! Seeded generators of valid requests, responses and message sets for the core tests.
#![allow(dead_code)]

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary_core::message::{CompressionCodec, Magic, Message, MessageSetBuilder};
use tributary_core::wire::{
    AckedProduceResponse, ClusterIdentityResponse, ErrorCode, FetchRequest, FetchResponse,
    MultiFetchResponse, OffsetsRequest, OffsetsResponse, ProduceAck, ProduceRequest, Request,
    Response, TopicName, TopicOriginsRequest, TopicOriginsResponse,
};

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

pub fn hex(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .map(|line| {
            line.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const TOPIC_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";

pub fn topic(rng: &mut ChaCha8Rng) -> TopicName {
    loop {
        let max = if rng.random_bool(0.1) { 255 } else { 12 };
        let len = rng.random_range(1..=max);
        let raw: Vec<u8> = (0..len)
            .map(|_| TOPIC_CHARS[rng.random_range(0..TOPIC_CHARS.len())])
            .collect();
        if let Ok(t) = TopicName::from_bytes(&raw) {
            return t;
        }
    }
}

pub fn payload(rng: &mut ChaCha8Rng, max: usize) -> Bytes {
    let len = rng.random_range(0..=max);
    let mut out = vec![0u8; len];
    // Compressible half the time, so codecs see both kinds of input.
    if rng.random_bool(0.5) {
        rng.fill(&mut out[..]);
    } else {
        out.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = b"tributary"[i % 9]);
    }
    Bytes::from(out)
}

pub fn codec(rng: &mut ChaCha8Rng) -> CompressionCodec {
    [
        CompressionCodec::None,
        CompressionCodec::Gzip,
        CompressionCodec::Snappy,
    ][rng.random_range(0..3)]
}

/// Messages and the set they encode to (compressed into one wrapper unless `codec` is None).
pub fn message_set(rng: &mut ChaCha8Rng, codec: CompressionCodec) -> (Vec<Message>, Bytes) {
    let count = rng.random_range(0..8);
    let mut builder = MessageSetBuilder::new();
    let mut messages = Vec::new();
    for _ in 0..count {
        let magic = if codec == CompressionCodec::None && rng.random_bool(0.3) {
            Magic::V0
        } else {
            Magic::V1
        };
        let m = Message::with_codec(magic, CompressionCodec::None, payload(rng, 300));
        builder.push_message(&m);
        messages.push(m);
    }
    (messages, builder.build(codec))
}

pub fn produce(rng: &mut ChaCha8Rng) -> ProduceRequest {
    let codec = codec(rng);
    ProduceRequest {
        topic: topic(rng),
        partition: rng.random_range(-1..16),
        messages: message_set(rng, codec).1,
    }
}

pub fn fetch(rng: &mut ChaCha8Rng) -> FetchRequest {
    FetchRequest {
        topic: topic(rng),
        partition: rng.random(),
        offset: rng.random(),
        max_bytes: rng.random(),
    }
}

/// A source partition as a mirror request names it.
pub fn source_key(rng: &mut ChaCha8Rng) -> tributary_core::mirror::position::SourceKey {
    tributary_core::mirror::position::SourceKey {
        cluster: tributary_core::identity::ClusterId::parse(
            ["east", "west-1", "c0ffee"][rng.random_range(0..3)],
        )
        .expect("id"),
        topic: topic(rng),
        partition: tributary_core::consumer::BrokerPartition {
            broker_id: rng.random_range(0..5),
            partition: rng.random_range(0..8),
        },
    }
}

/// A MIRROR_PRODUCE or MIRROR_POSITIONS request.
pub fn mirror_request(rng: &mut ChaCha8Rng) -> Request {
    use tributary_core::wire::{MirrorPositionsRequest, MirrorSet, SourceStamp};
    match rng.random_bool(0.5) {
        true => Request::MirrorProduce(
            (0..rng.random_range(0..4))
                .map(|_| {
                    let start = rng.random_range(0..1_000_000);
                    MirrorSet {
                        produce: produce(rng),
                        source: SourceStamp {
                            key: source_key(rng),
                            start,
                            next: start + rng.random_range(1..10_000),
                        },
                    }
                })
                .collect(),
        ),
        false => Request::MirrorPositions(MirrorPositionsRequest {
            topic: topic(rng),
            partition: rng.random_range(-1..8),
            translate: (0..rng.random_range(0..4))
                .map(|_| (source_key(rng), rng.random_range(0..1_000_000)))
                .collect(),
        }),
    }
}

/// A MIRROR_PRODUCE or MIRROR_POSITIONS response.
pub fn mirror_response(rng: &mut ChaCha8Rng) -> Response {
    use tributary_core::wire::{
        MirrorAck, MirrorOutcome, MirrorPositionsResponse, MirrorProduceResponse, SourceHeld,
    };
    match rng.random_bool(0.5) {
        true => Response::MirrorProduce(MirrorProduceResponse {
            error: error_code(rng),
            acks: (0..rng.random_range(0..5))
                .map(|_| MirrorAck {
                    error: error_code(rng),
                    outcome: [
                        MirrorOutcome::Appended,
                        MirrorOutcome::Held,
                        MirrorOutcome::Overlap,
                    ][rng.random_range(0..3)],
                    partition: rng.random_range(-1..8),
                    offset: rng.random_range(-1..i64::MAX),
                    held_to: rng.random_range(-1..i64::MAX),
                })
                .collect(),
        }),
        false => Response::MirrorPositions(MirrorPositionsResponse {
            error: error_code(rng),
            sources: (0..rng.random_range(0..4))
                .map(|_| SourceHeld {
                    key: source_key(rng),
                    held_to: rng.random_range(0..i64::MAX),
                    mirror_end: rng.random_range(0..i64::MAX),
                })
                .collect(),
            translated: (0..rng.random_range(0..4))
                .map(|_| rng.random_range(-1..i64::MAX))
                .collect(),
        }),
    }
}

pub fn request(rng: &mut ChaCha8Rng) -> Request {
    match rng.random_range(0..9) {
        8 => mirror_request(rng),
        7 => Request::TopicOrigins(TopicOriginsRequest {
            topic: topic(rng),
            merge: origin_record(rng),
        }),
        6 => Request::ClusterIdentity,
        5 => Request::AckedProduce((0..rng.random_range(0..4)).map(|_| produce(rng)).collect()),
        0 => Request::Produce(produce(rng)),
        1 => Request::Fetch(fetch(rng)),
        2 => Request::MultiFetch((0..rng.random_range(0..6)).map(|_| fetch(rng)).collect()),
        3 => Request::MultiProduce((0..rng.random_range(0..4)).map(|_| produce(rng)).collect()),
        _ => Request::Offsets(OffsetsRequest {
            topic: topic(rng),
            partition: rng.random(),
            time: {
                let t = rng.random();
                [-1, -2, t][rng.random_range(0..3)]
            },
            max_offsets: rng.random(),
        }),
    }
}

/// An origin record's bytes as the wire carries them (empty, or a record's JSON).
pub fn origin_record(rng: &mut ChaCha8Rng) -> Bytes {
    let routes: Vec<String> = (0..rng.random_range(0..4))
        .map(|i| format!("[\"c{i}\",\"d{}\"]", rng.random_range(0..100)))
        .collect();
    match routes.is_empty() {
        true => Bytes::new(),
        false => Bytes::from(format!(
            "{{\"version\":1,\"routes\":[{}]}}",
            routes.join(",")
        )),
    }
}

pub fn error_code(rng: &mut ChaCha8Rng) -> ErrorCode {
    ErrorCode::from_code(rng.random_range(-2..7))
}

pub fn fetch_response(rng: &mut ChaCha8Rng) -> FetchResponse {
    let codec = codec(rng);
    let mut messages = message_set(rng, codec).1;
    // Fetch responses may end in a partial message.
    if !messages.is_empty() && rng.random_bool(0.3) {
        messages.truncate(rng.random_range(0..messages.len()));
    }
    FetchResponse {
        error: error_code(rng),
        messages,
    }
}

pub fn response(rng: &mut ChaCha8Rng) -> Response {
    match rng.random_range(0..7) {
        6 => mirror_response(rng),
        5 => Response::TopicOrigins(TopicOriginsResponse {
            error: error_code(rng),
            record: origin_record(rng),
        }),
        4 => Response::ClusterIdentity(ClusterIdentityResponse {
            error: error_code(rng),
            id: (0..rng.random_range(0..30))
                .map(|_| char::from(rng.random_range(b'a'..=b'z')))
                .collect(),
            name: ["", "east", "dc-1"][rng.random_range(0..3)].to_string(),
        }),
        3 => Response::AckedProduce(AckedProduceResponse {
            error: error_code(rng),
            acks: (0..rng.random_range(0..5))
                .map(|_| ProduceAck {
                    error: error_code(rng),
                    offset: rng.random_range(-1..i64::MAX),
                })
                .collect(),
        }),
        0 => Response::Fetch(fetch_response(rng)),
        1 => Response::MultiFetch(MultiFetchResponse {
            error: error_code(rng),
            blocks: (0..rng.random_range(0..5))
                .map(|_| fetch_response(rng))
                .collect(),
        }),
        _ => Response::Offsets(OffsetsResponse {
            error: error_code(rng),
            offsets: (0..rng.random_range(0..6))
                .map(|_| rng.random_range(0..i64::MAX))
                .collect(),
        }),
    }
}
