#!/bin/sh
# blco-tucker --backend cuda (the CUDA TTM kernel on the tensor in memory; on the SIMT
# emulation in a -Dcuda-emulation=true build): the same fits as --backend cpu, with every
# Y(n) whole and in row blocks; a tensor that does not fit the budget (it would have to be
# streamed) is refused with the reason. Skips (77) where no GPU answers.
# usage: test_blco_tucker_gpu.sh BLCO-TUCKER BLCO-GEN
set -u
tool=$1
gen=$2
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

expect() {
    want=$1 pat=$2
    shift 3
    expect_run "$want" "$pat" any -- "$@"
}
fits() { sed -n 's/.*"fit_history":\[\([^]]*\)\].*/\1/p' "$1"; }
# close A B: the fit histories agree entry by entry within 1e-9
close() {
    awk -v a="$(fits "$1")" -v b="$(fits "$2")" 'BEGIN {
        n = split(a, x, ","); m = split(b, y, ",")
        if (n != m || n == 0) exit 1
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-9) exit 1 }
    }'
}

"$gen" --kind lowrank --rank 3 --dims 60x50x40 --nnz 3K --seed 4 -o "$T/lr.blco" >/dev/null 2>&1 \
    || { echo "blco-gen failed"; exit 1; }
"$tool" "$T/lr.blco" --rank 3 --iters 1 --backend cuda -q >"$T/out" 2>&1
if [ $? -ne 0 ]; then
    if grep -q -- "--backend cuda: " "$T/out"; then
        echo "skip: $(cat "$T/out")"
        exit 77
    fi
    bad "--backend cuda failed: $(cat "$T/out")"
    finish
    exit 1
fi

# an exact rank-(3,3,3) tensor and a noisy one (3 iterations, --tol 0): cuda vs cpu
"$gen" --dims 300x40x30 --nnz 3K --seed 2 -o "$T/u.blco" >/dev/null 2>&1 || bad "gen u"
for t in lr u; do
    for b in cpu cuda; do
        expect 0 "" -- "$tool" "$T/$t.blco" --rank 3 --iters 3 --tol 0 -q --backend $b \
            --out "$T/$t-$b"
    done
    close "$T/$t-cpu/summary.json" "$T/$t-cuda/summary.json" && ok ||
        bad "$t: cuda fits $(fits "$T/$t-cuda/summary.json"), cpu $(fits "$T/$t-cpu/summary.json")"
done
# Y(1) (300 x 9) in row blocks on the GPU
expect 0 "Y\(1\) .* is computed in [0-9]+ row blocks" -- "$tool" "$T/u.blco" --rank 3 --iters 3 \
    --tol 0 --backend cuda --y-mem 8K --out "$T/u-cuda-blocks"
close "$T/u-cpu/summary.json" "$T/u-cuda-blocks/summary.json" && ok ||
    bad "row blocks on cuda: fits $(fits "$T/u-cuda-blocks/summary.json")"

# a tensor that does not fit the budget in memory: refused, with the way out
"$gen" --dims 4000x3000x2000 --nnz 3M --seed 3 -o "$T/big.blco" >/dev/null 2>&1 || bad "gen big"
expect 1 "--backend cuda runs the TTM chains on the tensor held in memory.*--backend cpu" -- \
    "$tool" "$T/big.blco" --rank 2 --init random --backend cuda --mem-limit 40M

finish
