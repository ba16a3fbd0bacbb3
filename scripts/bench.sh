#!/usr/bin/env bash
# Runs every benchmark and prints one table: each case, its figure, the ceiling it is compared
# with (measured in the same run, on this machine) and the ratio. Each bench's own output is
# kept in target/bench/<bench>.log and the table in target/bench/table.md.
#
#   scripts/bench.sh           the full run (about half an hour on 2 cores, ten minutes of it
#                              the mirror's live case), the figures to quote
#   scripts/bench.sh --quick   small volumes, one round: a regression check in a few minutes
#                              (once built); its ratios are noisier
#
# Benchmarks stay out of the CI test run: on a shared machine they are too noisy to gate on.
# The clients, mirror, scale and keeps_up benches start ZooKeeper (scripts/install-deps.sh installs it).
# Their data goes under TMPDIR; keeps_up's live case stops early, and says so in its row, when
# less than 4 GiB is left there.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  --quick) export TRIBUTARY_BENCH_QUICK=1; mode="quick" ;;
  "") unset TRIBUTARY_BENCH_QUICK; mode="full" ;;
  *) echo "usage: scripts/bench.sh [--quick]" >&2; exit 2 ;;
esac

out=target/bench
mkdir -p "$out"
echo "building the benchmarks (release)..." >&2
cargo bench --locked --no-run -p tributary -p tributary-tests 2>"$out/build.log" \
  || { cat "$out/build.log" >&2; exit 1; }

start=$(date +%s)
benches=("tributary log" "tributary broker" "tributary-tests clients" "tributary-tests mirror" "tributary-tests scale" "tributary-tests keeps_up")
for entry in "${benches[@]}"; do
  read -r package bench <<<"$entry"
  echo "running the $bench bench ($mode; $(( $(date +%s) - start )) s so far)..." >&2
  if ! cargo bench --locked -q -p "$package" --bench "$bench" >"$out/$bench.log" 2>"$out/$bench.err"; then
    echo "the $bench bench failed; its output is in $out/$bench.log and $out/$bench.err:" >&2
    tail -20 "$out/$bench.err" >&2
    exit 1
  fi
done

{
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r)."
  echo "Run: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $mode, $(( $(date +%s) - start )) s."
  echo
  echo "| case | figure | same-run ceiling | ratio |"
  echo "|---|---|---|---|"
  for entry in "${benches[@]}"; do
    read -r _ bench <<<"$entry"
    grep '^@@' "$out/$bench.log" | awk -F'\t' '{printf "| %s | %s | %s | %s |\n", $2, $3, $4, $5}'
  done
} | tee "$out/table.md"
