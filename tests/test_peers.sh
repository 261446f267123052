#!/bin/sh
# perf/peers against stand-in peers (scripts printing SPLATT's and ALTO's timing lines with
# known times) and the real blco tools on a tiny tensor: the medians it reads from each
# output, the ratios to blco's own times, a peer that fails on a tensor (recorded, the run
# goes on), the dense step's same-run baseline, and refused arguments.
# usage: test_peers.sh SOURCE_ROOT BUILD_ROOT
src=$1 build=$2
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
py=$(command -v python3) || { echo "no python3"; exit 77; }
tns="$src/tests/data/tiny3.tns"

# SPLATT: `cpd` prints "its = N (S s)", iteration 1 slow (left out); `bench` the same.
cat >"$T/splatt" <<'SH'
#!/bin/sh
case $1 in
cpd) printf '  its =   1 (9.000s)  fit = 0.1  delta = +1e-1\n'
     for i in 2 3 4 5; do printf '  its =   %d (0.%d00s)  fit = 0.2  delta = +1e-2\n' $i $i; done ;;
bench) for i in 1 2 3 4 5; do printf '  mode 1 0.010s\n    its =   %d (0.0%d0s)\n' $i $i; done ;;
*) exit 2 ;;
esac
SH
# ALTO: "it: N ... time(for MTTKRP): S s (M s)"; -p prints the total of -m sweeps.
cat >"$T/alto" <<'SH'
#!/bin/sh
case " $* " in
*" -p "*) echo "ALTO runtime:   2.500000" ;;
*) for i in 0 1 2 3 4; do
       printf 'it: %d\t fit: 0.5\t fit-delta: 0.1\ttime(for MTTKRP): %d.0000 s (0.1000 s)\n' $i $((i + 1))
   done ;;
esac
case $* in *broken*) echo "cpd64: Assertion failed" >&2; exit 134 ;; esac
exit 0
SH
chmod +x "$T/splatt" "$T/alto"
cp "$tns" "$T/broken.tns"

expect_run 0 '"what": "summary"' any -- "$py" "$src/perf/peers" --build "$build" \
    --splatt "$T/splatt" --alto "$T/alto" --iters 5 --tmpdir "$T" -o "$T/res.jsonl" \
    "$tns" "$T/broken.tns"
"$py" - "$T/res.jsonl" <<'PY' && ok || bad "perf/peers results: see above"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert recs[0]["what"] == "machine" and recs[0]["threads"] == 2 and recs[0]["rank"] == 16, recs[0]
t = [r for r in recs if r["what"] == "tensor"]
assert [r["tensor"] for r in t] == ["tiny3.tns", "broken.tns"], t
a = t[0]
# medians of iterations 2..5: SPLATT cpd 0.2 0.3 0.4 0.5 -> 0.35; bench 0.02..0.05 -> 0.035
assert abs(a["splatt_cpd_s"] - 0.35) < 1e-9 and abs(a["splatt_mttkrp_s"] - 0.035) < 1e-9, a
# ALTO: iterations 1..4 of 0..4 take 2..5 s -> 3.5; the benchmark 2.5 s over 5 sweeps
assert abs(a["alto_cpd_s"] - 3.5) < 1e-9 and abs(a["alto_mttkrp_s"] - 0.5) < 1e-9, a
assert a["blco_cpd_s"] > 0 and a["blco_mttkrp_s"] > 0, a
assert abs(a["cpd_vs_splatt"] - round(0.35 / a["blco_cpd_s"], 3)) <= 2e-3 * a["cpd_vs_splatt"], a
assert abs(a["mttkrp_vs_alto"] - round(0.5 / a["blco_mttkrp_s"], 3)) <= 2e-3 * a["mttkrp_vs_alto"], a
b = t[1]
assert "Assertion failed" in b["alto_error"] and "alto_cpd_s" not in b and "cpd_vs_alto" not in b, b
assert "splatt_cpd_s" in b, b
s = recs[-1]
assert s["what"] == "summary" and s["cpd_vs_splatt_target"] == 2.5 and s["cpd_vs_alto_target"] == 1.5, s
PY

# --dense-baseline: blco-cpd again with the dense step's per-row reference, no peers needed
expect_run 0 '"dense_vs_rows": [0-9.]+' any -- "$py" "$src/perf/peers" --build "$build" \
    --dense-baseline --iters 3 --tmpdir "$T" "$tns"
grep -q '"blco_rows_dense_s": [0-9.e-]*, "blco_rows_dense_share"' "$T/out" && ok ||
    bad "no blco_rows_dense_s in: $(cat "$T/out")"

expect_run 2 "--splatt PATH and/or --alto PATH" err -- "$py" "$src/perf/peers" --build "$build" "$tns"
expect_run 2 "not an executable" err -- "$py" "$src/perf/peers" --build "$build" \
    --alto "$tns" "$tns"
expect_run 2 "not built" err -- "$py" "$src/perf/peers" --build "$T/nowhere" \
    --alto "$T/alto" "$tns"
finish
