#!/bin/sh
# Distributed CP-ALS over the GPU backend (blco/cpd.h's row operations): on 2 ranks with every
# mode cut between them and on 3 ranks with the default split, blco-cpd --backend cuda gives
# the single-process CPU fit (1e-10); --deterministic gives the same bits twice; a run killed
# after a checkpoint and resumed on the same ranks ends with an uninterrupted run's bits.
# Skips (77) without mpirun, in a build without MPI, and where no GPU answers (a real one or
# the SIMT emulation).
# usage: test_mpi_gpu.sh BLCO-CPD BLCO-GEN BLCO-PACK
set -u
cpd=$1
gen=$2
pack=$3
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

command -v mpirun >/dev/null 2>&1 || { echo "no mpirun: skipped"; exit 77; }
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_btl=self,vader
export OMPI_MCA_rmaps_base_oversubscribe=1
export BLCO_EMU_DEVICES=1
# The emulated build runs under ASan: Open MPI's plugins keep allocations at exit that the
# leak checker reports (from libmpi and unloaded modules); every other check stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
mpi() { # NP ARGS...: under mpirun, 300 s at most (the emulation is slow; a hang fails)
    np=$1
    shift
    timeout 300 mpirun --oversubscribe -np "$np" "$@"
}

"$gen" --kind powerlaw --dims 6000x3000x50 --nnz 60000 --seed 3 -q -o "$T/p3.tns" ||
    bad "blco-gen failed"
"$pack" "$T/p3.tns" --segment-nnz 1024 -q -o "$T/p3.blco" || bad "blco-pack failed"
"$cpd" "$T/p3.blco" --rank 2 --iters 1 --backend cuda -q >"$T/out" 2>&1 </dev/null
if grep -q "no GPU answers\|no CUDA backend" "$T/out"; then
    echo "no GPU answers: skipped"
    exit 77
fi
mpi 2 "$cpd" "$T/p3.blco" --rank 2 --iters 1 --backend cpu -q >"$T/out" 2>&1 </dev/null
if grep -q "this build has no MPI" "$T/out"; then
    echo "this build has no MPI: skipped"
    exit 77
fi

fit() { # FILE.json: the summary's (last line's) fit
    tail -n 1 "$1" | sed -n 's/.*"fit":\([-0-9.e+]*\),.*/\1/p'
}
same() { # A B: |a - b| <= 1e-10
    awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-10) }'
}
same_out() { # DIR DIR: the same factors and lambda, byte for byte
    for f in A1 A2 A3 lambda; do
        cmp -s "$1/$f.npy" "$2/$f.npy" || return 1
    done
}

args="--rank 4 --iters 6 --tol 0 --seed 2"
expect 0 "" -- "$cpd" $args --backend cpu --json-out "$T/c.json" "$T/p3.blco"
ref=$(fit "$T/c.json")
for v in "2 0" "3 4096"; do
    set -- $v
    mpi "$1" "$cpd" $args --backend cuda --mpi-short-rows "$2" -v --json-out "$T/g$1.json" \
        "$T/p3.blco" >"$T/out" 2>&1 </dev/null
    st=$?
    [ $st -eq 0 ] && grep -q "CP-ALS on $1 ranks over the backend's own factors" "$T/out" && ok ||
        bad "$1 ranks, --mpi-short-rows $2: exit $st: $(tail -n 5 "$T/out")"
    same "$(fit "$T/g$1.json")" "$ref" && ok ||
        bad "$1 ranks on the GPU: fit $(fit "$T/g$1.json"), the CPU's $ref"
    grep -q '"pageable_async_copies":0,' "$T/g$1.json" && ok ||
        bad "pageable asynchronous copies: $(tail -n 1 "$T/g$1.json")"
done

for k in 1 2; do
    mpi 3 "$cpd" $args --backend cuda --deterministic -q --out "$T/d$k" "$T/p3.blco" \
        >"$T/out" 2>&1 </dev/null || bad "--deterministic on 3 ranks: $(tail -n 5 "$T/out")"
done
same_out "$T/d1" "$T/d2" && ok || bad "two --deterministic runs on 3 ranks gave other bits"

# Killed (rank 0, SIGKILL) after the checkpoint of iteration 3, resumed on the same 2 ranks.
BLCO_CPD_KILL_AFTER_ITER=3 mpi 2 "$cpd" $args --backend cuda --checkpoint "$T/ck" -q \
    "$T/p3.blco" >"$T/out" 2>&1 </dev/null
st=$?
[ $st -ne 0 ] && [ $st -ne 124 ] && grep -q "^iteration 3$" "$T/ck/state" && ok ||
    bad "the killed run: exit $st: $(tail -n 5 "$T/out")"
mpi 2 "$cpd" $args --backend cuda --checkpoint "$T/ck" --resume -q --out "$T/r" "$T/p3.blco" \
    >"$T/out" 2>&1 </dev/null || bad "the resumed run: $(tail -n 5 "$T/out")"
mpi 2 "$cpd" $args --backend cuda --deterministic -q --out "$T/s" "$T/p3.blco" \
    >"$T/out" 2>&1 </dev/null || bad "the straight run: $(tail -n 5 "$T/out")"
same_out "$T/r" "$T/s" && ok || bad "the resumed run on 2 ranks differs from the straight run"
finish
