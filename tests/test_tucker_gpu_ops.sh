#!/bin/sh
# blco-tucker --backend cuda|hybrid over HOOI's device backend (blco_stream_tucker_ops: the
# factors, Y(n) and the dense steps on the GPUs; on the SIMT emulation in a
# -Dcuda-emulation=true build): the fits of --backend cpu to 1e-10 on the real aminoacid and
# flask author x file x month tensors and on a generated one (two devices and hybrid too);
# once the tensor is resident an iteration moves only the small matrices (no factor and no
# Y(n) comes back), measured from the transfer counters of runs of 2 and 4 iterations; no
# copy from pageable memory. Skips (77) where no GPU answers.
# usage: test_tucker_gpu_ops.sh BLCO-TUCKER BLCO-GEN BLCO-PACK
set -u
tool=$1
gen=$2
pack=$3
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

fits() { sed -n 's/.*"fit_history":\[\([^]]*\)\].*/\1/p' "$1"; }
# close A B: the fit histories agree entry by entry within 1e-10
close() {
    awk -v a="$(fits "$1")" -v b="$(fits "$2")" 'BEGIN {
        n = split(a, x, ","); m = split(b, y, ",")
        if (n != m || n == 0) exit 1
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-10) exit 1 }
    }'
}
# bytes FILE DIR KIND: the bytes of one kind over the bus (DIR h2d or d2h) in summary.json
bytes() {
    sed -n 's/.*"'"$2"'":{\([^}]*\)}.*/\1/p' "$1" | tr ',' '\n' | sed -n 's/"'"$3"'":\([0-9]*\)/\1/p'
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

# ---- fits: cpu against cuda (and hybrid, two devices) ----
data=${BLCO_SHARED_DATA:-}
tensors=lr
if [ -f "$data/aminoacid.tns" ]; then
    "$pack" "$data/aminoacid.tns" -o "$T/amino.blco" -q && tensors="$tensors amino" ||
        bad "packing aminoacid"
else
    echo "note: no aminoacid.tns in BLCO_SHARED_DATA: that comparison was skipped"
fi
if [ -f "$data/flask-author-file-month.tns.zst" ]; then
    "$pack" "$data/flask-author-file-month.tns.zst" -o "$T/flask.blco" -q &&
        tensors="$tensors flask" || bad "packing flask"
fi
for t in $tensors; do
    case $t in
    flask) r="--ranks 4x4x3" ;;
    *) r="--rank 3" ;;
    esac
    for b in cpu cuda hybrid cuda2; do
        case $b in
        cuda2) env="BLCO_EMU_DEVICES=2" be=cuda ;;
        *) env="" be=$b ;;
        esac
        expect 0 "" -- env $env "$tool" "$T/$t.blco" $r --iters 4 --tol 0 -q --backend $be \
            --threads 2 --out "$T/$t-$b"
    done
    for b in cuda hybrid cuda2; do
        close "$T/$t-cpu/summary.json" "$T/$t-$b/summary.json" && ok ||
            bad "$t: $b fits $(fits "$T/$t-$b/summary.json"), cpu $(fits "$T/$t-cpu/summary.json")"
        grep -q '"pageable_async_copies":0,"pageable_copies":0,' "$T/$t-$b/summary.json" && ok ||
            bad "$t $b: copies from pageable memory: $(cat "$T/$t-$b/summary.json")"
    done
done

# ---- ranks above Y(n)'s numerical rank (an exact rank-3 tensor at ranks 5): U_n has fewer
# singular vectors than columns, is completed on the host as the host backend does and sent
# back (said at -v); Y(n) in row blocks (--y-mem) runs HOOI on the host backend (said too) ----
for b in cpu cuda; do
    expect 0 "" -- "$tool" "$T/lr.blco" --rank 5 --iters 3 --tol 0 -v --backend $b --out "$T/r5-$b"
    cp "$T/err" "$T/r5-$b.err"
done
grep -q "completed on the host" "$T/r5-cuda.err" && ok || bad "rank 5: not said: $(cat "$T/r5-cuda.err")"
close "$T/r5-cpu/summary.json" "$T/r5-cuda/summary.json" && ok ||
    bad "rank 5: cuda fits $(fits "$T/r5-cuda/summary.json"), cpu $(fits "$T/r5-cpu/summary.json")"
expect 0 "" -- "$tool" "$T/lr.blco" --rank 3 --iters 3 --tol 0 -v --backend cuda --y-mem 1K \
    --out "$T/lr-yblocks"
grep -q "HOOI runs on the host backend" "$T/err" && ok || bad "--y-mem: not said: $(cat "$T/err")"
grep -q '"d2h":{[^}]*"outputs":[1-9]' "$T/lr-yblocks/summary.json" && ok ||
    bad "--y-mem: no Y(n) came back: $(cat "$T/lr-yblocks/summary.json")"
expect 0 "" -- "$tool" "$T/lr.blco" --rank 3 --iters 3 --tol 0 -q --backend cpu --out "$T/lr-c3"
close "$T/lr-c3/summary.json" "$T/lr-yblocks/summary.json" && ok ||
    bad "--y-mem: fits $(fits "$T/lr-yblocks/summary.json"), cpu $(fits "$T/lr-c3/summary.json")"

# ---- what crosses the bus per iteration, the tensor resident on the device ----
# aminoacid at rank 3 (else the generated tensor): Y(1) is 5 x 9 (its U_1, 5 x 3, made on the
# host and sent), Y(2) 201 x 9 and Y(3) 61 x 9 stay on the GPU. Per iteration: Grams (25,
# 81, 81 doubles), V and 1 / sigma (2 x 30), four 3 x 3 matrices each way for the Cholesky QR
# steps (2 x 72), U_1 (15), the core (27) and the decoder's verdicts: about 3 KB, far below
# one Y(n) or U_n (U_2 alone is 4.8 KB, Y(2) 14 KB); no factor or output comes back.
t=lr
[ -f "$T/amino.blco" ] && t=amino
for it in 2 4; do
    expect 0 "" -- "$tool" "$T/$t.blco" --rank 3 --iters $it --tol 0 -q --backend cuda \
        --gpus 0 --out "$T/io-$it"
done
s2="$T/io-2/summary.json"
s4="$T/io-4/summary.json"
grep -q '"resident_batches":[1-9]' "$s4" && ok || bad "$t: not resident on the device: $(cat "$s4")"
total=0
for d in h2d d2h; do
    for k in tensor factors outputs small; do
        a=$(bytes "$s2" $d $k)
        b=$(bytes "$s4" $d $k)
        [ -n "$a" ] && [ -n "$b" ] || { bad "$t: no $d $k bytes in summary.json"; continue; }
        per=$(((b - a) / 2))
        total=$((total + per))
        case "$d $k" in
        "d2h factors" | "d2h outputs" | "h2d outputs" | "h2d tensor")
            [ "$per" -eq 0 ] && ok || bad "$t: $per bytes of $k $d per iteration (none expected)" ;;
        esac
    done
done
limit=4096
[ "$t" = lr ] && limit=8192
[ "$total" -gt 0 ] && [ "$total" -le $limit ] && ok ||
    bad "$t: an iteration moved $total bytes over the bus (at most $limit expected)"
grep -q '"pageable_async_copies":0,"pageable_copies":0,' "$s4" && ok || bad "$t: copies from pageable memory: $(cat "$s4")"

finish
