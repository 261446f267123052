#!/bin/sh
# SIGINT and SIGTERM stop blco-mttkrp and blco-cpd in every residency tier (streamed,
# resident stored, resident decoded, partial) and through both readers: each run is
# signalled once its first pass is over (the residency decided, the tensor resident where
# it fits), must exit 130 or 143 within a few seconds, and its --stats file must end
# with the final record (status "canceled") naming the tier the run was in. A .tns input
# (computed in memory by the kernel) stops as well. The GPU backends are signalled in
# test_blco_cpd_gpu.sh (the gpu suite, where a GPU or the emulation answers).
# Usage: test_signals.sh BLCO-MTTKRP BLCO-CPD BLCO-GEN BLCO-PACK
mttkrp=$1 cpd=$2 gen=$3 pack=$4
. "$BLCO_TESTS_DIR/harness.sh"

# 400K nonzeros in segments of 16K: small enough to keep resident, in enough segments for
# a budget to hold part of them. A pass takes milliseconds; the runs ask for thousands.
$gen --kind uniform --dims 3000x2000x1000 --nnz 400K --seed 3 -o "$T/x.tns" 2>/dev/null &&
    $pack "$T/x.tns" --segment-nnz 16384 -o "$T/x.blco" 2>/dev/null ||
    { echo "cannot make the tensor"; exit 1; }

# field NAME FILE: the value of NAME in the last line of FILE.
field() {
    tail -n 1 "$2" | sed -n "s/.*\"$1\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p"
}

# run_signal SIG WANT_STATUS TIER_PATTERN TOOL ARGS...: starts the run, waits for its
# first pass to end, sends SIG, then checks the exit status, the time it took to stop,
# the message, and the final record.
run_signal() {
    sig=$1 want=$2 tier=$3
    shift 3
    rm -f "$T/s.jsonl"
    "$@" --stats "$T/s.jsonl" --stats-interval 0.05 --no-progress >/dev/null 2>"$T/err" </dev/null &
    pid=$!
    # the first pass is over once a record counts one
    n=0
    while [ $n -lt 1200 ] && ! grep -q '"passes":[1-9]' "$T/s.jsonl" 2>/dev/null; do
        sleep 0.05
        n=$((n + 1))
    done
    sleep 0.3 # now in the later passes: resident where it fits
    t0=$(date +%s.%N)
    kill -"$sig" $pid
    (sleep 20; kill -KILL $pid) >/dev/null 2>&1 & # a run that ignores it
    dog=$!
    wait $pid
    st=$?
    t1=$(date +%s.%N)
    kill $dog 2>/dev/null
    what="$sig to $(basename "$1") $tier"
    secs=$(echo "$t1 $t0" | awk '{printf "%.2f", $1 - $2}')
    echo "$what: exit $st after ${secs}s"
    if [ $st -ne "$want" ]; then
        bad "$what: exit $st after ${secs}s, expected $want: $(cat "$T/err")"
        return
    fi
    awk -v s="$secs" 'BEGIN { exit !(s < 5) }' && ok || bad "$what: took ${secs}s to stop"
    grep -q "stopped by SIG$sig" "$T/err" && ok || bad "$what: no 'stopped by SIG$sig' in: $(cat "$T/err")"
    [ "$(field type "$T/s.jsonl")" = '"final"' ] && ok || bad "$what: the last record is not final"
    [ "$(field error "$T/s.jsonl")" = '"canceled"' ] && ok ||
        bad "$what: final record: $(tail -n 1 "$T/s.jsonl")"
    res=$(field residency "$T/s.jsonl")
    echo "$res" | grep -Eq "^\"$tier" && ok || bad "$what: residency $res, expected $tier"
}

for tool in mttkrp cpd; do
    if [ $tool = mttkrp ]; then
        cmd="$mttkrp $T/x.blco --rank 16 --iters 100000"
        partial=7M # after the kernel's staged factors and private rows
    else
        cmd="$cpd $T/x.blco --rank 4 --iters 100000 --tol 0"
        partial=6M # CP-ALS takes its share first
    fi
    run_signal INT 130 "streamed" $cmd --residency none
    run_signal TERM 143 "streamed" $cmd --residency none --io pread
    run_signal INT 130 "resident \\(stored\\)" $cmd --residency stored
    run_signal TERM 143 "resident \\(stored\\)" $cmd --residency stored --io pread
    run_signal INT 130 "resident \\(decoded\\)" $cmd
    run_signal TERM 143 "resident \\(decoded\\)" $cmd --io pread
    run_signal INT 130 "partial" $cmd --mem-limit $partial
    run_signal TERM 143 "partial" $cmd --mem-limit $partial --io pread
done

# A .tns input is built in memory and computed by the kernel directly: it stops too.
$mttkrp "$T/x.tns" --rank 16 --iters 100000 -q >/dev/null 2>"$T/err" </dev/null &
pid=$!
wait_caught $pid
sleep 2
kill -INT $pid
(sleep 20; kill -KILL $pid) >/dev/null 2>&1 &
dog=$!
wait $pid
st=$?
kill $dog 2>/dev/null
[ $st -eq 130 ] && grep -q "stopped by SIGINT" "$T/err" && ok ||
    bad "SIGINT to blco-mttkrp x.tns: exit $st: $(cat "$T/err")"

finish
