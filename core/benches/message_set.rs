//! Validation and iteration throughput of 1 MiB message sets, beside `crc32fast` alone over the
//! same bytes in the same process (the ceiling: validation must at least CRC every payload).
//!
//! Run: `cargo bench -p tributary-core --bench message_set`. Prints GB/s and the ratio to CRC.
// A benchmark measures wall time by definition; it is not on any simulated path.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tributary_core::message::{
    validate_set, CompressionCodec, DeepIter, MessageSetBuilder, ShallowIter, ValidationLimits,
    DECOMPRESSED_BYTES_MAX_DEFAULT,
};

/// A named benchmark body.
type Case<'a> = (&'static str, Box<dyn Fn() + 'a>);

const SET_BYTES: usize = 1024 * 1024;
const ROUNDS: usize = 7;
const ROUND_TIME: Duration = Duration::from_millis(300);

fn build_set(payload_bytes: usize) -> Bytes {
    let mut builder = MessageSetBuilder::new();
    let mut total = 0;
    let mut i: u32 = 0;
    while total + payload_bytes + 10 <= SET_BYTES {
        let payload: Vec<u8> = (0..payload_bytes)
            .map(|j| (i as usize * 31 + j) as u8)
            .collect();
        builder.push(payload);
        total += payload_bytes + 10;
        i += 1;
    }
    builder.build(CompressionCodec::None)
}

/// Median over rounds of bytes per second, each round running `f` for about ROUND_TIME.
fn throughput(bytes: usize, mut f: impl FnMut()) -> f64 {
    let mut rates = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let mut runs = 0u64;
        while start.elapsed() < ROUND_TIME {
            f();
            runs += 1;
        }
        rates.push(bytes as f64 * runs as f64 / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    rates[ROUNDS / 2]
}

fn main() {
    println!(
        "{:<28} {:>10} {:>10} {:>8}",
        "benchmark (1 MiB set)", "GB/s", "crc GB/s", "ratio"
    );
    for payload in [100, 1024] {
        let set = build_set(payload);
        let crc = throughput(set.len(), || {
            black_box(crc32fast::hash(black_box(&set)));
        });
        // The floor of the work validation must do: one CRC call per payload.
        let payloads: Vec<&[u8]> = ShallowIter::new(&set, 0)
            .map(|e| e.unwrap().message.payload)
            .collect();
        let cases: [Case<'_>; 4] = [
            (
                "crc per payload only",
                Box::new(|| {
                    black_box(
                        payloads
                            .iter()
                            .map(|p| crc32fast::hash(black_box(p)))
                            .fold(0, u32::wrapping_add),
                    );
                }),
            ),
            (
                "shallow iterate",
                Box::new(|| {
                    black_box(
                        ShallowIter::new(black_box(&set), 0)
                            .filter(|e| e.is_ok())
                            .count(),
                    );
                }),
            ),
            (
                "deep iterate",
                Box::new(|| {
                    black_box(
                        DeepIter::new(set.clone(), 0, DECOMPRESSED_BYTES_MAX_DEFAULT)
                            .filter(|e| e.is_ok())
                            .count(),
                    );
                }),
            ),
            (
                "validate_set",
                Box::new(|| {
                    black_box(validate_set(black_box(&set), ValidationLimits::default()).is_ok());
                }),
            ),
        ];
        for (name, f) in cases {
            let rate = throughput(set.len(), f);
            println!(
                "{:<28} {:>10.2} {:>10.2} {:>8.2}",
                format!("{name}, {payload} B msgs"),
                rate / 1e9,
                crc / 1e9,
                rate / crc
            );
        }
    }
}
