//! Replays every fuzz target's function over the stored corpus in `fuzz/corpus/<target>/`, then
//! over seeded mutations of it, so the normal (stable) test run exercises what the fuzzers run.
//!
//! `TRIBUTARY_WRITE_CORPUS=1 cargo test -p tributary-core --test fuzz_replay` rewrites the seed
//! files (valid frames of every request and response type, message sets of every codec, and
//! the sample configs).
// Tests read the sample files from disk; the sans-IO wall is for core's library code.
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use rand::Rng;
use tributary_core::fuzzing;
use tributary_core::message::CompressionCodec;

const MUTATIONS_PER_TARGET: usize = 3000;

type Target = (&'static str, fn(&[u8]));

const TARGETS: [Target; 9] = [
    ("request_frames", fuzzing::request_stream),
    ("response_frames", fuzzing::response_frame),
    ("message_set", fuzzing::message_set),
    ("properties", fuzzing::properties),
    ("log_recovery", fuzzing::log_recovery),
    ("cluster_records", fuzzing::cluster_records),
    ("offsets_file", fuzzing::offsets_file),
    ("security_texts", fuzzing::security_texts),
    ("position_records", fuzzing::position_records),
];

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for seed in 0..12u64 {
        let mut rng = rng(seed);
        out.push(match target {
            "request_frames" => {
                // Cycle through all five request types.
                loop {
                    let r = request(&mut rng);
                    if r.request_type().id() as u64 == seed % 5 {
                        break r.to_bytes().unwrap().to_vec();
                    }
                }
            }
            "response_frames" => response(&mut rng).to_bytes().unwrap().to_vec(),
            "cluster_records" => match seed % 3 {
                0 => format!("{{\"version\":\"1\",\"id\":\"id{seed}\",\"name\":\"dc{seed}\"}}")
                    .into_bytes(),
                1 => format!("{{\"version\":\"1\",\"id\":\"id{seed}\"}}").into_bytes(),
                _ => origin_record(&mut rng).to_vec(),
            },
            "offsets_file" => {
                // Lines as ExportZkOffsets writes them, sometimes with 0.7.2's oddities: a
                // repeated node, a trailing empty line, CRLF.
                let mut text = String::new();
                for i in 0..=seed % 4 {
                    text.push_str(&format!(
                        "/consumers/group{seed}/offsets/topic{i}/{}-{}:{}\n",
                        i % 3,
                        seed % 2,
                        rng.random_range(0..1_000_000_000i64)
                    ));
                }
                match seed % 4 {
                    1 => text.push('\n'),
                    2 => text = text.replace('\n', "\r\n"),
                    3 => text.push_str(&text.clone()),
                    _ => {}
                }
                text.into_bytes()
            }
            "position_records" => position_records(&mut rng, seed),
            "security_texts" => match seed % 3 {
                0 => format!("PLAINTEXT://h{seed}:9092,SSL://h{seed}:9093").into_bytes(),
                1 => format!(
                    "# rules\nfetch CN=m{seed},O=Example .*\nproduce * public-{seed}|t.*  # all\nall ANONYMOUS x\n"
                )
                .into_bytes(),
                _ => format!("PLAINTEXT://:9092,SSL://127.0.0.{seed}:9093").into_bytes(),
            },
            "message_set" => {
                let codec = [
                    CompressionCodec::None,
                    CompressionCodec::Gzip,
                    CompressionCodec::Snappy,
                ][seed as usize % 3];
                message_set(&mut rng, codec).1.to_vec()
            }
            "log_recovery" => {
                // Control byte, then sets of every codec back to back, sometimes cut short.
                let mut bytes = vec![(seed * 37) as u8];
                for i in 0..4 {
                    let codec = [
                        CompressionCodec::None,
                        CompressionCodec::Gzip,
                        CompressionCodec::Snappy,
                    ][(seed as usize + i) % 3];
                    bytes.extend_from_slice(&message_set(&mut rng, codec).1);
                }
                if seed % 2 == 1 {
                    bytes.truncate(bytes.len() - bytes.len() / 7);
                }
                bytes
            }
            _ => {
                let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
                let mut files: Vec<_> = std::fs::read_dir(dir)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .collect();
                files.sort();
                std::fs::read(&files[seed as usize % files.len()]).unwrap()
            }
        });
    }
    out
}

/// Frames of the mirror requests and responses, kept beside the seeds above (which predate
/// them) so that the older seed files stay as they are.
fn mirror_seeds(target: &str) -> Vec<Vec<u8>> {
    let mut rng = rng(0x4d1);
    let frame = |rng: &mut rand_chacha::ChaCha8Rng| match target {
        "request_frames" => Some(mirror_request(rng).to_bytes().unwrap().to_vec()),
        "response_frames" => Some(mirror_response(rng).to_bytes().unwrap().to_vec()),
        _ => None,
    };
    (0..6).filter_map(|_| frame(&mut rng)).collect()
}

fn write_seeds() {
    for (target, _) in TARGETS {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, bytes) in seeds(target).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), bytes).unwrap();
        }
        for (i, bytes) in mirror_seeds(target).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-mirror-{i:02}")), bytes).unwrap();
        }
    }
}

fn mutate(rng: &mut impl Rng, input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.random_range(1..8) {
        match rng.random_range(0..5) {
            0 if !out.is_empty() => {
                let i = rng.random_range(0..out.len());
                out[i] ^= 1 << rng.random_range(0..8);
            }
            1 if !out.is_empty() => out.truncate(rng.random_range(0..out.len())),
            2 => {
                let at = rng.random_range(0..=out.len());
                let byte =
                    [0x00, 0x01, 0x7f, 0x80, 0xff, b'=', b'\\', b'\n'][rng.random_range(0..8)];
                out.insert(at, byte);
            }
            3 if out.len() >= 4 => {
                // Overwrite a length-sized word with an interesting value.
                let i = rng.random_range(0..=out.len() - 4);
                let v: i32 = [0, -1, 1, i32::MAX, i32::MIN, 5, 6][rng.random_range(0..7)];
                out[i..i + 4].copy_from_slice(&v.to_be_bytes());
            }
            _ => {
                let extra: Vec<u8> = (0..rng.random_range(0..16)).map(|_| rng.random()).collect();
                out.extend_from_slice(&extra);
            }
        }
    }
    out
}

#[test]
fn fuzz_targets_hold_on_the_corpus_and_its_mutations() {
    if std::env::var_os("TRIBUTARY_WRITE_CORPUS").is_some() {
        write_seeds();
    }
    for (target, run) in TARGETS {
        let dir = corpus_dir(target);
        let mut corpus: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (run with TRIBUTARY_WRITE_CORPUS=1 to create it)",
                    dir.display()
                )
            })
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        assert!(
            corpus.len() >= 12,
            "{target}: corpus has only {} files",
            corpus.len()
        );
        corpus.sort();
        for input in &corpus {
            run(input);
        }
        let mut rng = rng(0xF022);
        for i in 0..MUTATIONS_PER_TARGET {
            let input = mutate(&mut rng, &corpus[i % corpus.len()]);
            run(&input);
        }
    }
}

/// A log end (8 bytes) and the position records of a few sets as a broker writes them, the
/// end sometimes inside the last set or before it, the file sometimes torn.
fn position_records(rng: &mut impl Rng, seed: u64) -> Vec<u8> {
    use tributary_core::consumer::BrokerPartition;
    use tributary_core::identity::ClusterId;
    use tributary_core::mirror::position::{record, Position, SourceKey};
    let mut file = Vec::new();
    let (mut source, mut end) = (0i64, 0u64);
    for i in 0..=seed % 5 {
        let (source_bytes, mirror_bytes) = (rng.random_range(1..500), rng.random_range(1..600));
        end += rng.random_range(0..50);
        let position = Position {
            key: SourceKey {
                cluster: ClusterId::parse(&format!("c{}", i % 2)).unwrap(),
                topic: "orders".parse().unwrap(),
                partition: BrokerPartition {
                    broker_id: (i % 3) as i32,
                    partition: 0,
                },
            },
            source_start: source,
            source_next: source + source_bytes,
            mirror_start: end,
            mirror_end: end + mirror_bytes,
        };
        source += source_bytes;
        end += mirror_bytes;
        file.extend_from_slice(&record::encode(&position));
    }
    let log_end = match seed % 3 {
        0 => end,
        1 => end - end / 9,
        _ => end + 10,
    };
    if seed % 4 == 3 {
        file.truncate(file.len() - 5);
    }
    let mut bytes = log_end.to_be_bytes().to_vec();
    bytes.extend_from_slice(&file);
    bytes
}
