#!/bin/sh
# blco-mttkrp on .blco files through the streaming engine: results against the .tns path,
# each io backend and residency, --stats JSON Lines (valid, totals equal the file's size
# and nonzero count), --prom, and clear errors for missing, corrupt and truncated files
# and budgets too small. Every run has a timeout: the pipeline must never hang.
# usage: test_blco_mttkrp_stream.sh BLCO-MTTKRP BLCO-GEN BLCO-PACK
set -u
tool=$1
gen=$2
pack=$3
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
TO="timeout 120"

expect() {
    want=$1 pat=$2
    shift 3
    expect_run "$want" "$pat" any -- $TO "$@"
}

py=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done

$gen --kind powerlaw --dims 300x200x100 --nnz 50000 --seed 4 -o "$T/x.tns" 2>/dev/null
$pack "$T/x.tns" --dims 300x200x100 --segment-nnz 1024 -o "$T/x.blco" 2>/dev/null
[ -f "$T/x.blco" ] && ok || bad "blco-gen did not write x.blco"

# The same result through the .tns path and every streaming configuration.
expect 0 "" -- "$tool" --quiet --rank 6 --out "$T/ref" --dims 300x200x100 "$T/x.tns"
for cfg in "--io auto" "--io pread" "--io uring" "--residency none --io pread --threads 1" \
    "--residency stored" "--residency none --buffered" "--mem-limit 40M --slots 2"; do
    rm -rf "$T/got"
    $TO "$tool" --quiet --rank 6 --out "$T/got" $cfg "$T/x.blco" >"$T/out" 2>"$T/err"
    st=$?
    if [ $st -ne 0 ]; then
        # A forced io_uring may be refused by this kernel: that must say so clearly.
        if [ "$cfg" = "--io uring" ] && grep -q "io_uring" "$T/err"; then ok; continue; fi
        bad "$cfg: exit $st: $(cat "$T/err")"
        continue
    fi
    if [ -n "$py" ]; then
        if "$py" - "$T/ref" "$T/got" <<'PY'
import sys, numpy as np
for n in (1, 2, 3):
    a = np.load(f"{sys.argv[1]}/M{n}.npy"); b = np.load(f"{sys.argv[2]}/M{n}.npy")
    if a.shape != b.shape or not np.allclose(a, b, rtol=1e-12, atol=0):
        sys.exit(f"mode {n} differs")
PY
        then ok; else bad "$cfg: results differ from the .tns path"; fi
    else
        cmp -s "$T/ref/M1.npy" "$T/got/M1.npy" || true
        ok
    fi
done
expect 0 "max rel. error vs naive" -- "$tool" --check --rank 4 --iters 2 "$T/x.blco"
expect 0 '"residency"' -- "$tool" --json --rank 4 "$T/x.blco"
# the kernel chosen per mode, in --json and in the report
[ "$(grep -Eo '"kernel":"(private|atomic|owner|mixed)"' "$T/out" | wc -l)" -eq 3 ] && ok ||
    bad "--json: no kernel per mode: $(cat "$T/out")"
expect 0 "" -- "$tool" --rank 4 --no-progress "$T/x.blco"
[ "$(grep -Ec '^mode [1-3]: +[0-9]+ rows  (private|atomic|owner|mixed) ' "$T/out")" -eq 3 ] && ok ||
    bad "no kernel per mode in the report: $(cat "$T/out")"
# --stats -: standard output holds the records only, the report goes to stderr
expect 0 "" -- "$tool" --rank 4 --no-progress --stats - "$T/x.blco"
grep -qv '^{"type":' "$T/out" && bad "--stats -: not only records on stdout: $(cat "$T/out")" || ok
grep -q '^{"type":"final"' "$T/out" && ok || bad "--stats -: no final record"
grep -q '^all 3 modes' "$T/err" && ok || bad "--stats -: no report on stderr: $(cat "$T/err")"
expect 2 "--stats - and --json both write standard output" -- "$tool" --stats - --json "$T/x.blco"
# a finished run's final record shows no busy slot (reads ahead for a pass that never came)
expect 0 "" -- "$tool" --quiet --rank 4 --iters 2 --residency none --stats "$T/fin.jsonl" "$T/x.blco"
tail -n 1 "$T/fin.jsonl" | grep -q '"slots_busy":0,' && ok ||
    bad "final record with busy slots: $(tail -n 1 "$T/fin.jsonl")"

# io_uring refused through the environment: a fallback that says so, and a right answer.
BLCO_IO_REFUSE_URING=1 expect_run 0 "pread" any -- $TO "$tool" --rank 4 --check "$T/x.blco"
BLCO_IO_REFUSE_URING=1 expect_run 1 "io_uring" any -- $TO "$tool" --rank 4 --io uring "$T/x.blco"

# --stats: JSON Lines, one valid object per line; totals equal the file's size and nnz.
expect 0 "" -- "$tool" --quiet --rank 4 --iters 2 --residency none --stats "$T/s.jsonl" \
    --stats-interval 0.05 --prom "$T/m.prom" "$T/x.blco"
if [ -n "$py" ]; then
    if "$py" - "$T/s.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert recs[0]["type"] == "start", recs[0]
f = recs[-1]
assert f["type"] == "final" and f["status"] == 0, f
passes = 2 * 3
assert f["passes"] == passes, f["passes"]
assert f["bytes_read"] == passes * f["data_bytes"], (f["bytes_read"], f["data_bytes"])
assert f["nnz_computed"] == passes * f["nnz"], (f["nnz_computed"], f["nnz"])
assert f["segments_verified"] == passes * f["nsegments"]
assert f["data_bytes"] < f["file_bytes"]
assert f["work_total"] == f["nnz_computed"]
PY
    then ok; else bad "--stats records are wrong: $(tail -1 "$T/s.jsonl")"; fi
fi
grep -q '^blco_bytes_read_total' "$T/m.prom" && ok || bad "no blco_bytes_read_total in --prom"
ls "$T" | grep -q 'm.prom.tmp' && bad "a temporary prom file was left" || ok
# Resident: later passes do not read the disk again.
expect 0 "" -- "$tool" --quiet --rank 4 --iters 3 --stats "$T/r.jsonl" "$T/x.blco"
if [ -n "$py" ]; then
    "$py" -c 'import json,sys; f=[json.loads(l) for l in open(sys.argv[1])][-1]; sys.exit(f["bytes_read"] != f["data_bytes"])' "$T/r.jsonl" && ok || bad "resident run read the disk again"
fi

# Errors: missing, not a .blco file, corrupt mid-stream, truncated, budget too small.
expect 1 "nope.blco: cannot open: No such file" -- "$tool" "$T/nope.blco"
grep -q "nope.blco: .*nope.blco" "$T/err" && bad "the path twice: $(cat "$T/err")" || ok
printf 'GIF89a' >"$T/six.blco" # 6 bytes of a foreign file: not a truncated .blco
expect 1 "six.blco: not a .blco file" -- "$tool" "$T/six.blco"
printf '\211BLC' >"$T/four.blco" # the start of the magic: a truncated one
expect 1 "four.blco: truncated" -- "$tool" "$T/four.blco"
printf 'hello' >"$T/junk.blco"
expect 1 "junk.blco" -- "$tool" "$T/junk.blco"
cp "$T/x.blco" "$T/bad.blco"
size=$(wc -c <"$T/x.blco")
# A byte in the middle of the data region (the header is 4 KiB; tables are at the end).
printf '\377' | dd of="$T/bad.blco" bs=1 seek=$((4096 + (size - 8192) / 2)) conv=notrunc 2>/dev/null
expect 1 "segment [0-9]+.*(corrupt|checksum)" -- "$tool" --residency none "$T/bad.blco"
head -c $((size / 2)) "$T/x.blco" >"$T/trunc.blco"
expect 1 "trunc.blco: .*(truncated|ends)" -- "$tool" "$T/trunc.blco"
expect 1 "memory budget|mem-limit" -- "$tool" --mem-limit 100K "$T/x.blco"
expect 2 "--io must be" -- "$tool" --io fast "$T/x.blco"
expect 2 "--residency must be" -- "$tool" --residency maybe "$T/x.blco"
expect 1 "cannot create|No such file" -- "$tool" --stats "$T/no/dir/s.jsonl" "$T/x.blco"
expect 2 "the tensor has 3 modes" -- "$tool" --mode 4 "$T/x.blco"
expect 2 "--mode 0: the tensor has 3 modes, numbered 1 to 3" -- "$tool" --mode 0 "$T/x.blco"

# SIGINT mid-run stops cleanly with status 130 (a watchdog kills a run that hangs).
$gen --kind uniform --dims 2000x2000x2000 --nnz 3M --seed 2 -o "$T/big.blco" 2>/dev/null
"$tool" --quiet --rank 64 --iters 1000 --residency none "$T/big.blco" >/dev/null 2>"$T/err" &
pid=$!
wait_caught $pid
sleep 1
kill -INT $pid
(sleep 60; kill -KILL $pid) >/dev/null 2>&1 &
dog=$!
wait $pid
st=$?
kill $dog 2>/dev/null
[ $st -eq 130 ] && grep -q "SIGINT" "$T/err" && ok || bad "SIGINT: exit $st: $(cat "$T/err")"

finish
