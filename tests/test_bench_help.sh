#!/bin/sh
# Every benchmark answers --help with its usage on standard output and exit status 0, and
# refuses an unknown option with status 2 (the benchmarks themselves are never run here).
# usage: test_bench_help.sh BENCH...
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
for b in "$@"; do
    expect_run 0 "" any -- "$b" --help
    name=$(basename "$b")
    grep -q "^usage: $name" "$T/out" && ok || bad "$name --help: no usage on stdout: $(cat "$T/out" "$T/err")"
    [ ! -s "$T/err" ] && ok || bad "$name --help wrote to stderr: $(cat "$T/err")"
    expect_run 2 "" any -- "$b" --no-such-option
done
expect_run 0 "--iters: 3 to 64" any -- "$(dirname "$1")/bench_cpd" --help
# the distributed benchmark is a script (it drives mpirun)
dist="${BLCO_TESTS_DIR:-$(dirname "$0")}/../perf/bench_dist.sh"
expect_run 0 "^usage: bench_dist.sh" any -- sh "$dist" --help
[ ! -s "$T/err" ] && ok || bad "bench_dist.sh --help wrote to stderr: $(cat "$T/err")"
expect_run 2 "" any -- sh "$dist" --no-such-option
finish
