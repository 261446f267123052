#!/bin/sh
# What the tools and Python say about GPUs when none runs the job (issue 34: a .tns input
# and Python said "CUDA driver version is insufficient for CUDA runtime version", a .blco
# input "no GPU answers", and -q still printed it; issue 33: --gpus and --gpu-mem-limit were
# ignored without a word under --backend auto). One reason, in the same words, for a .tns
# and a .blco input, blco-cpd and Python; nothing under -q; --backend cuda refused with that
# reason; unused GPU options named once. Skips (77) where a real GPU answers.
# usage: test_gpu_messages.sh BLCO-GEN BLCO-MTTKRP BLCO-CPD [PYTHON PYTHONPATH]
gen=$1 mttkrp=$2 cpd=$3 python=${4:-} pypath=${5:-}
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

"$gen" --dims 30x20x10 --nnz 500 --seed 1 -q -o "$T/x.tns" && "$gen" --dims 30x20x10 --nnz 500 \
    --seed 1 -q -o "$T/x.blco" || { echo "blco-gen failed"; exit 1; }
# reason FILE: what follows "backend cpu (" on the backend line, without the closing ")"
reason() { sed -n 's/^[a-z-]*: backend cpu (\(.*\))$/\1/p' "$1"; }

expect_run 0 "backend " err -- "$mttkrp" "$T/x.blco" --rank 2
grep -q "backend cpu" "$T/err" || { echo "SKIP: a GPU runs the job: $(grep backend "$T/err")"; exit 77; }
r_blco=$(reason "$T/err")
expect_run 0 "backend cpu" err -- "$mttkrp" "$T/x.tns" --rank 2
r_tns=$(reason "$T/err")
[ -n "$r_blco" ] && [ "$r_tns" = "$r_blco" ] && ok ||
    bad "a .tns input says '$r_tns', a .blco input '$r_blco'"
expect_run 0 "backend cpu" err -- "$cpd" "$T/x.blco" --rank 2 --iters 1
[ "$(reason "$T/err")" = "$r_blco" ] && ok || bad "blco-cpd says '$(reason "$T/err")', blco-mttkrp '$r_blco'"
case $r_blco in
*"CUDA driver version is insufficient"*) bad "the CUDA runtime's words, not ours: $r_blco" ;;
*) ok ;;
esac

# -q: nothing at all
for f in x.tns x.blco; do
    expect_run 0 "" err -- "$mttkrp" "$T/$f" --rank 2 -q
    [ ! -s "$T/err" ] && ok || bad "-q on $f printed: $(cat "$T/err")"
done

# --backend cuda: refused with the same reason (not for a build without CUDA, whose reason
# says so)
why=${r_blco#auto: }
case $why in
"the only GPU is the SIMT emulation"*) ;; # --backend cuda runs on it
*)
    for f in x.tns x.blco; do
        expect_run 1 "" err -- "$mttkrp" "$T/$f" --rank 2 --backend cuda
        grep -qF -- "--backend cuda: $why" "$T/err" && ok ||
            bad "--backend cuda on $f: $(cat "$T/err"), expected '$why'"
    done ;;
esac

# unused GPU options: one warning naming them; none when they are not given
expect_run 0 "" err -- "$mttkrp" "$T/x.blco" --rank 2 -q --gpus 5 --gpu-mem-limit 1G
[ "$(grep -c 'warning: --gpus and --gpu-mem-limit not used, the CPU runs this job' "$T/err")" = 1 ] &&
    ok || bad "--gpus 5 --gpu-mem-limit 1G under auto: $(cat "$T/err")"
expect_run 0 "" err -- "$cpd" "$T/x.blco" --rank 2 --iters 1 -q --gpu-mem-limit 1G
[ "$(grep -c 'warning: --gpu-mem-limit not used' "$T/err")" = 1 ] && ok ||
    bad "blco-cpd --gpu-mem-limit under auto: $(cat "$T/err")"

# Python: the same reason
if [ -n "$python" ]; then
    expect_run 0 "" any -- env PYTHONPATH="$pypath" "$python" -c "
import sys, blco
with blco.open(sys.argv[1]) as t:
    print(t.stats()['backend_reason'])" "$T/x.blco"
    [ "$(cat "$T/out")" = "cpu ($r_blco)" ] && ok ||
        bad "Python says '$(cat "$T/out")', the tools 'cpu ($r_blco)'"
fi
finish
