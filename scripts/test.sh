#!/usr/bin/env bash
# Runs every test of the workspace, as CI does: lints (including the sans-IO wall around core),
# then all unit, integration, snapshot, hostile-input and fuzz-corpus replay tests.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== clippy (warnings are errors; core/clippy.toml forbids I/O, clocks and global RNG in core)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== tests"
cargo test --workspace --locked
