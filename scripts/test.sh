#!/usr/bin/env bash
# Runs every test of the workspace, as CI does: lints (including the sans-IO wall around core),
# then all unit, integration, snapshot, hostile-input and fuzz-corpus replay tests.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== clippy (warnings are errors; core/clippy.toml forbids I/O, clocks and global RNG in core)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== tests"
# Four tests at a time in each test binary: the end-to-end tests mostly wait on real processes
# (ZooKeeper, brokers, JVM clients), and two at a time left the two cores of CI half idle (their
# binaries took 409 s at two, 310 s at four); the simulator's CPU-bound suite loses little by
# sharing the cores four ways (572 s, 590 s). One invocation for the whole workspace, so that
# every crate is built once, with the workspace's features.
RUST_TEST_THREADS=4 cargo test --workspace --locked
