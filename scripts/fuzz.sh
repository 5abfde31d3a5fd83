#!/bin/sh
# Runs every fuzz target (fuzz/Cargo.toml) for SECONDS each (default 60) on its committed
# corpus, with libFuzzer through cargo-fuzz on the nightly toolchain. New interesting inputs
# grow fuzz/corpus/<target>/ in place; a crash stops that target and leaves its input in
# fuzz/artifacts/<target>/ (then: fix it and copy the input to fuzz/regressions/<target>/).
# Exits non-zero if any target crashed.
# FUZZ_BUILD=dev builds the targets unoptimised (a much shorter build; CI uses it for its
# 30-second runs), otherwise optimised.
# Usage: sh scripts/fuzz.sh [SECONDS] [TARGET...]
set -eu
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
[ $# -gt 0 ] && shift
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz and the nightly toolchain are needed: rustup toolchain install nightly && cargo install cargo-fuzz" >&2
    exit 1
fi
targets="$*"
if [ -z "$targets" ]; then
    targets=$(cargo +nightly fuzz list)
fi
if [ "${FUZZ_BUILD:-release}" = dev ]; then
    mode="--dev"
else
    mode="-O"
fi
# One build of every target first (the run below reuses it).
cargo +nightly fuzz build $mode --debug-assertions
failed=""
for target in $targets; do
    mkdir -p "corpus/$target"
    echo "== $target: ${seconds}s"
    # -rss_limit_mb: a parser that allocates without bound is a bug too.
    if ! cargo +nightly fuzz run $mode --debug-assertions "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 2>&1 \
        | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+== ERROR|SUMMARY|Done)|panicked|Test unit written"; then
        :
    fi
    if ls "artifacts/$target"/crash-* "artifacts/$target"/oom-* "artifacts/$target"/timeout-* >/dev/null 2>&1; then
        failed="$failed $target"
    fi
done
if [ -n "$failed" ]; then
    echo "crashing inputs for:$failed (see fuzz/artifacts/)" >&2
    exit 1
fi
echo "all fuzz targets ran ${seconds}s without a crash"
