#!/bin/sh
# blco-mttkrp --backend: the GPU kernels against the naive CPU oracle (--check fails beyond
# 1e-12 relative to the largest entry) on 3- to 8-mode tensors from .tns and from .blco, each
# kernel forced, when a GPU answers (a real one, or the SIMT emulation of a
# -Dcuda-emulation=true build); and the refusals and fallbacks when none does.
# usage: test_blco_mttkrp_gpu.sh BLCO-MTTKRP BLCO-GEN BLCO-PACK
set -u
tool=$1
gen=$2
pack=$3
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

expect() {
    want=$1 pat=$2
    shift 3
    expect_run "$want" "$pat" err -- "$@"
}

"$gen" --dims 30x40x20 --nnz 2000 --seed 5 -o "$T/o3.tns" >/dev/null 2>&1 || bad "blco-gen"
expect 2 "--backend must be auto, cpu or cuda" -- "$tool" --backend gpu "$T/o3.tns"
expect 2 "--kernel register is a GPU kernel" -- "$tool" --backend cpu --kernel register "$T/o3.tns"
expect 2 "--kernel atomic is a CPU kernel" -- "$tool" --backend cuda --kernel atomic "$T/o3.tns"
expect 0 "backend cpu \(--backend cpu\)" -- "$tool" --backend cpu --check "$T/o3.tns"

# Does a GPU answer? auto says which backend it took.
"$tool" --rank 2 --mode 1 "$T/o3.tns" >"$T/out" 2>"$T/err"
if ! grep -q "backend cuda" "$T/err"; then
    grep -q "backend cpu (auto: " "$T/err" && ok || bad "auto without a GPU: $(cat "$T/err")"
    expect 1 "blco-mttkrp: --backend cuda: .*(no CUDA|CUDA device)" -- \
        "$tool" --backend cuda "$T/o3.tns"
    expect 2 "--kernel hierarchical needs the GPU" -- "$tool" --kernel hierarchical "$T/o3.tns"
    echo "no GPU answers in this build: checked the refusals only"
    finish
    exit $?
fi
grep -q "emulated" "$T/err" && echo "the GPU is the SIMT emulation: results are checked, times are not a GPU's"

# Orders 3..8, uniform and power-law, every kernel: --check compares every mode with the
# naive CPU kernel and exits 1 beyond 1e-12.
for shape in 30x40x20 60x7x90x5 9x20x11x6x13 5x6x7x4x3x5 4x5x3x6x2x5x3 3x4x3x5x2x3x4x2; do
    for kind in uniform powerlaw; do
        f="$T/t-$shape-$kind.tns"
        "$gen" --kind $kind --dims $shape --nnz 3000 --seed 7 -o "$f" >/dev/null 2>&1 || bad "gen $shape"
        for k in auto register hierarchical; do
            expect 0 "backend cuda" -- "$tool" --backend cuda --kernel $k --check --mode all \
                --rank 9 "$f"
            grep -q "MISMATCH" "$T/out" && bad "$shape $kind $k: $(cat "$T/out")"
        done
    done
done
# Wide ranks take the four-column path; the JSON names the backend and each mode's kernel.
expect 0 "" -- "$tool" --backend cuda --check --rank 70 --json --quiet "$T/t-60x7x90x5-powerlaw.tns"
grep -q '"backend":"cuda"' "$T/out" && grep -q '"kernel":"hierarchical"' "$T/out" &&
    grep -q '"max_rel_error"' "$T/out" && ok || bad "JSON of the GPU run: $(cat "$T/out")"

# A .blco input: loaded into memory for the GPU; auto streams it on the CPU and says why.
"$pack" "$T/t-9x20x11x6x13-uniform.tns" -o "$T/x.blco" >/dev/null 2>&1 || bad "blco-pack"
expect 0 "loaded into memory" -- "$tool" --backend cuda --check --mode all "$T/x.blco"
expect 0 "backend cpu \(auto: a .blco input streams" -- "$tool" --mode 2 "$T/x.blco"
expect 1 "does not fit the memory budget" -- "$tool" --backend cuda --mem-limit 4K "$T/x.blco"

# The GPU and the CPU write the same results (to rounding).
expect 0 "" -- "$tool" --backend cuda --quiet --rank 4 --out "$T/gpu" "$T/o3.tns"
expect 0 "" -- "$tool" --backend cpu --quiet --rank 4 --out "$T/cpu" "$T/o3.tns"
for m in 1 2 3; do
    [ -s "$T/gpu/M$m.npy" ] && [ "$(wc -c <"$T/gpu/M$m.npy")" = "$(wc -c <"$T/cpu/M$m.npy")" ] &&
        ok || bad "M$m.npy from the GPU"
done
finish
