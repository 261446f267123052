#!/bin/sh
# Checkpoint folders of blco-cpd and blco-tucker (issues 33 and 34): a folder in use by a
# run is refused to a second one (which used to delete the live run's files), and the first
# run ends as if alone; a folder holding one tool's checkpoint is refused by the other, with
# a message naming who wrote it; a run stopped by SIGINT before its first checkpoint says
# that there is nothing to resume; --resume and --init fit the budget that the run fits.
# usage: test_checkpoints.sh BLCO-CPD BLCO-TUCKER BLCO-GEN
set -u
cpd=$1
tucker=$2
gen=$3
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

"$gen" --kind powerlaw --skew 2 --dims 3000x2000x1000 --nnz 300K --seed 4 -q -o "$T/p.blco" ||
    bad "blco-gen failed"

# wait_for FILE: until FILE exists and is not empty (at most 20 s)
wait_for() {
    n=0
    while [ ! -s "$1" ] && [ $n -lt 400 ]; do
        sleep 0.05
        n=$((n + 1))
    done
    [ -s "$1" ]
}

# ---- a second run in a folder that a live run uses: refused, the live run unharmed ----
cargs="--rank 8 --iters 30 --tol 0 --threads 1 --residency none"
"$cpd" $cargs -q --out "$T/alone" "$T/p.blco" || bad "blco-cpd alone"
"$cpd" $cargs -q --checkpoint "$T/ck" --out "$T/first" "$T/p.blco" </dev/null &
first=$!
wait_for "$T/ck/state" && ok || bad "no checkpoint state from the first run"
kill -STOP $first
expect 1 "checkpoint folder .*ck is in use by another run \(pid $first on " -- \
    "$cpd" $cargs --iters 1 --checkpoint "$T/ck" --resume "$T/p.blco"
expect 1 "in use by another run \(pid $first" -- \
    "$cpd" $cargs --checkpoint "$T/ck" "$T/p.blco"
expect 1 "in use by another run \(pid $first" -- "$tucker" --rank 3 --checkpoint "$T/ck" "$T/p.blco"
kill -CONT $first
wait $first
st=$?
[ $st -eq 0 ] && ok || bad "the first run exited $st after a second one tried its folder"
for f in A1.npy A2.npy A3.npy lambda.npy; do
    cmp -s "$T/alone/$f" "$T/first/$f" && ok || bad "the first run's $f differs from a run alone"
done
# the folder is free again once the run is over
expect 0 "nothing to do" -- "$cpd" $cargs --checkpoint "$T/ck" --resume "$T/p.blco"

# blco-tucker's folder is locked too
targs="--rank 3 --iters 30 --tol 0 --threads 1 --residency none"
"$tucker" $targs -q --checkpoint "$T/tk" "$T/p.blco" </dev/null >/dev/null &
first=$!
wait_for "$T/tk/state" && ok || bad "no checkpoint state from blco-tucker"
kill -STOP $first
expect 1 "checkpoint folder .*tk is in use by another run \(pid $first" -- \
    "$tucker" $targs --checkpoint "$T/tk" --resume "$T/p.blco"
kill -CONT $first
wait $first
st=$?
[ $st -eq 0 ] && ok || bad "blco-tucker exited $st after a second run tried its folder"

# ---- one tool's checkpoint, another tool: refused, naming who wrote it ----
grep -q "^writer blco-cpd .*--rank 8 .*--checkpoint .*/ck" "$T/ck/state" && ok ||
    bad "the CP-ALS state does not name its writer: $(cat "$T/ck/state")"
grep -q "^writer blco-tucker .*--rank 3" "$T/tk/state" && ok ||
    bad "the Tucker state does not name its writer: $(cat "$T/tk/state")"
for resume in "" --resume; do
    expect 1 "ck holds a CP-ALS checkpoint, not a Tucker one: resume it with blco-cpd, or give this run another folder \(written by: blco-cpd --rank 8 " -- \
        "$tucker" --rank 3 --checkpoint "$T/ck" $resume "$T/p.blco"
    expect 1 "tk holds a Tucker checkpoint, not a CP-ALS one: resume it with blco-tucker, or give this run another folder \(written by: blco-tucker --rank 3 " -- \
        "$cpd" --rank 3 --checkpoint "$T/tk" $resume "$T/p.blco"
done
grep -q "^blco-cpd-checkpoint" "$T/ck/state" && ok || bad "blco-tucker took over the CP-ALS folder"
grep -q "^blco-tucker-state" "$T/tk/state" && ok || bad "blco-cpd took over the Tucker folder"
# the lock goes with the run that held it: the folders hold their checkpoints only
for d in ck tk; do
    [ -z "$(ls "$T/$d" | grep -v '^iter-\|^state$')" ] && ok || bad "$d holds: $(ls "$T/$d")"
done

# ---- SIGINT before the first checkpoint: nothing to resume, and said so ----
"$gen" --kind uniform --dims 3000x2000x1000 --nnz 2M --seed 4 -q -o "$T/big.blco" ||
    bad "blco-gen failed"
# stop_early TOOL DIR ARGS...: SIGINT as soon as the run's --stats file has its start record
# (the handlers are set by then), before the first iteration (a few hundred ms) can end;
# tried 3 times in case the machine let the first iteration end first.
stop_early() {
    tool=$1 dir=$2
    shift 2
    for try in 1 2 3; do
        rm -rf "$dir" "$T/early.jsonl"
        "$tool" "$@" --checkpoint "$dir" --stats "$T/early.jsonl" --no-progress "$T/big.blco" \
            >"$T/out" 2>"$T/err" </dev/null &
        pid=$!
        n=0
        while [ ! -s "$T/early.jsonl" ] && [ $n -lt 200000 ]; do n=$((n + 1)); done
        kill -STOP $pid
        [ -e "$dir/state" ] || { kill -INT $pid; kill -CONT $pid; wait $pid; return $?; }
        kill -CONT $pid
        wait $pid
    done
    return 255
}
stop_early "$cpd" "$T/ck2" --rank 16 --iters 5 --tol 0 --threads 1 --residency none
st=$?
[ $st -eq 130 ] && grep -q "stopped by SIGINT; no checkpoint of this run was written yet (its first iteration did not end) in .*ck2: start it again, without --resume" "$T/err" &&
    ok || bad "blco-cpd stopped before its first checkpoint: exit $st: $(cat "$T/err")"
grep -q "continue with --resume" "$T/err" && bad "told to resume: $(cat "$T/err")" || ok
expect 1 "holds no checkpoint" -- "$cpd" --rank 16 --checkpoint "$T/ck2" --resume "$T/big.blco"
stop_early "$tucker" "$T/tk2" --rank 6 --iters 5 --tol 0 --threads 1 --residency none
st=$?
[ $st -eq 130 ] && grep -q "no checkpoint of this run was written yet .*tk2: start it again, without --resume" "$T/err" &&
    ok || bad "blco-tucker stopped before its first checkpoint: exit $st: $(cat "$T/err")"

# ---- --resume and --init within the budget the run fits in ----
# Factors of 400000 x 8 (25 MiB): a run fits --mem-limit 64M; resuming it used to read each
# factor into a copy of its own first and needed 100M ("damaged checkpoint: ... memory
# budget too small").
"$gen" --dims 400000x100x10 --nnz 200K --seed 3 -q -o "$T/long.blco" || bad "blco-gen failed"
largs="--rank 8 --iters 3 --tol 0 --threads 1 --mem-limit 64M"
expect 0 "" -- "$cpd" $largs -q --out "$T/lstraight" "$T/long.blco"
BLCO_CPD_KILL_AFTER_ITER=1 "$cpd" $largs -q --checkpoint "$T/lk" "$T/long.blco" \
    >/dev/null 2>&1 </dev/null
grep -q '^iteration 1$' "$T/lk/state" && ok || bad "no checkpoint of iteration 1"
expect 0 "" -- "$cpd" $largs -q --checkpoint "$T/lk" --resume --out "$T/lresumed" "$T/long.blco"
for f in A1.npy A2.npy A3.npy lambda.npy; do
    cmp -s "$T/lstraight/$f" "$T/lresumed/$f" && ok || bad "resumed within 64M: $f differs"
done
expect 0 "init from" -- "$cpd" $largs --init "$T/lstraight" "$T/long.blco"

finish
