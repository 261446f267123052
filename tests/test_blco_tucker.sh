#!/bin/sh
# blco-tucker end to end: options and errors; an exact low-multilinear-rank tensor fitted
# (fit >= 0.9999); aminoacid at 3x3x3 against a dense numpy HOOI from the same start (fit
# within 1e-6 at every iteration); a run killed after a checkpoint and resumed equals an
# uninterrupted one; the budget error that names Y(n); Y(n) in row and in column blocks.
# usage: test_blco_tucker.sh BLCO-TUCKER BLCO-GEN BLCO-PACK
set -u
tool=$1
gen=$2
pack=$3
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

# json_num FILE KEY: a top-level number of summary.json
json_num() { sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p" "$1"; }

# ---- help and usage errors ----
expect 0 "Usage: blco-tucker" -- "$tool" --help
for word in --ranks --rank --init --seed --tol --iters --mem-limit --out --stats \
            --checkpoint --resume core.npy summary.json --y-mem "row blocks" --fibers; do
    grep -q -- "$word" "$T/out" && ok || bad "--help does not mention $word"
done
expect 2 "no input tensor" -- "$tool" --rank 3
expect 2 "--ranks R1xR2x.. or --rank R is required" -- "$tool" x.blco
expect 2 "not both" -- "$tool" --rank 2 --ranks 2x2x2 x.blco
expect 2 "--ranks: every rank must be a positive integer \('0x5x5'\)" -- "$tool" --ranks 0x5x5 x.blco
expect 2 "--backend must be auto, cpu, cuda or hybrid" -- "$tool" --rank 2 --backend gpu x.blco
expect 2 "--resume needs --checkpoint" -- "$tool" --rank 2 --resume x.blco
expect 1 "nope.blco" -- "$tool" --rank 2 "$T/nope.blco"

# ---- an exact rank-(3,3,3) tensor: fit 1 ----
"$gen" --kind lowrank --rank 3 --dims 60x50x40 --nnz 6K --seed 4 -o "$T/lr.blco" >/dev/null 2>&1 \
    && ok || bad "blco-gen failed"
expect 2 "gives 2 ranks for a tensor of 3 modes" -- "$tool" --ranks 3x3 "$T/lr.blco"
expect 1 "rank 70 of mode 1 is above" -- "$tool" --rank 70 "$T/lr.blco"
for init in hosvd random; do
    expect 0 "fit" -- "$tool" "$T/lr.blco" --rank 3 --init $init --iters 5 --out "$T/lr-$init" \
        --stats "$T/lr.jsonl"
    fit=$(json_num "$T/lr-$init/summary.json" fit)
    awk -v f="$fit" 'BEGIN { exit !(f >= 0.9999) }' && ok || bad "lowrank $init: fit $fit < 0.9999"
    # core.npy is the N-d core, as TensorLy's tucker returns it (issue 33: it was 3 x 9)
    head -c 128 "$T/lr-$init/core.npy" | grep -aq "'shape': (3, 3, 3), }" && ok ||
        bad "lowrank $init: core.npy: $(head -c 128 "$T/lr-$init/core.npy")"
    for f in U1.npy U2.npy U3.npy core.npy summary.json; do
        [ -s "$T/lr-$init/$f" ] && ok || bad "lowrank $init: no $f"
    done
done
grep -q '"iteration"' "$T/lr.jsonl" && ok || bad "--stats has no iteration record"


# ---- --tol is relative to the fit (issue 34): random data, fit near 0, does not stop after
# 2 iterations on an absolute 1e-5, and is warned about; a structured tensor is not ----
"$gen" --kind powerlaw --dims 20000x15000x10000 --nnz 100K --skew 1.5 -q -o "$T/pl.blco" ||
    bad "blco-gen powerlaw failed"
expect 0 "stopped after 6 iterations" -- "$tool" "$T/pl.blco" --rank 4 --iters 6 --tol 1e-5
grep -q "^blco-tucker: warning: fit [0-9.e-]* is near 0: the Tucker model" "$T/err" && ok ||
    bad "no warning on a fit near 0: $(cat "$T/err")"
expect 0 "converged after" -- "$tool" "$T/lr.blco" --rank 3 --iters 20 --tol 1e-6
grep -q "near 0" "$T/err" && bad "a warning on a good fit: $(cat "$T/err")" || ok

# ---- .tns text, packed first into a temporary .blco that is gone at the end (issue 34):
# the same fit as on the packed file ----
"$gen" --kind lowrank --rank 3 --dims 60x50x40 --nnz 6K --seed 4 -o "$T/lr.tns" >/dev/null 2>&1 &&
    "$pack" "$T/lr.tns" -o "$T/lrt.blco" -q || bad "blco-gen/blco-pack of lr.tns failed"
mkdir "$T/tmp"
"$tool" "$T/lrt.blco" --rank 3 --init random --iters 3 --tol 0 -q --out "$T/t-blco" >/dev/null 2>&1
TMPDIR="$T/tmp" expect 0 "" -- "$tool" "$T/lr.tns" --rank 3 --init random --iters 3 --tol 0 \
    --out "$T/t-tns"
grep -q "lr.tns is text: packing it into a temporary .blco in $T/tmp, deleted when done" "$T/err" &&
    ok || bad "no word of the packing: $(cat "$T/err")"
[ -z "$(ls -A "$T/tmp")" ] && ok || bad "left in TMPDIR: $(ls -A "$T/tmp")"
[ "$(json_num "$T/t-tns/summary.json" fit)" = "$(json_num "$T/t-blco/summary.json" fit)" ] && ok ||
    bad "fit from .tns $(json_num "$T/t-tns/summary.json" fit), from .blco $(json_num "$T/t-blco/summary.json" fit)"

# ---- the HOSVD start: by MTTKRPs where they fit (k = 2 max(R) + 16 sign columns a mode),
# else by TTM chains, which can come in row blocks ----
"$gen" --dims 200000x150000x100000 --nnz 200K --seed 3 -q -o "$T/long.blco" || bad "gen long"
expect 0 "stopped after 2 iterations" -- "$tool" "$T/long.blco" --rank 2 --iters 2 --tol 0 -v \
    --mem-limit 400M
grep -q "MTTKRP sketches" "$T/err" && bad "TTM sketches with room to spare: $(cat "$T/err")" || ok
expect 0 "stopped after 2 iterations" -- "$tool" "$T/long.blco" --rank 2 --iters 2 --tol 0 -v \
    --mem-limit 60M
grep -q "MTTKRP sketches (.*) do not fit the .* left: it sketches by TTM chains" "$T/err" && ok ||
    bad "no word of the TTM sketches within 60M: $(cat "$T/err")"

# ---- too small a budget: the error names Y(n) and what it needs ----
"$gen" --dims 3000x200x100 --nnz 20K --seed 2 -o "$T/u.blco" >/dev/null 2>&1 || bad "gen u"

# ---- the live counters (issue 34): the iteration records name the iteration the table
# prints, with its fit; the progress starts at 0 and never passes 100% (the HOSVD start's
# passes and every row-block pass counted), whatever the residency ----
for res in auto none; do
    expect 0 "" -- "$tool" "$T/u.blco" --rank 3 --iters 3 --tol 0 --residency $res --y-mem 20K \
        --stats "$T/live-$res.jsonl" --stats-interval 0.01
    sed -n 's/^ *\([0-9]\)  \(0\.[0-9]*\) .*/\1 \2/p' "$T/out" >"$T/table"
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$T/live-$res.jsonl" "$T/table" >"$T/check" 2>&1 <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
table = [l.split() for l in open(sys.argv[2])]
its = [(r["iteration"], r["fit"]) for r in recs if r["type"] == "iteration"]
assert [i for i, _ in its] == [int(t[0]) for t in table] == [1, 2, 3], (its, table)
for (i, f), t in zip(its, table):
    assert abs(f - float(t[1])) < 1e-9, (i, f, t)
assert recs[0]["work_done"] == 0, recs[0]
for r in recs:
    assert r["work_done"] <= r["work_total"], r
    if r["type"] == "sample" and r["work_done"] < r["work_total"] and r["eta_s"] is not None:
        assert r["eta_s"] > 0, r
assert recs[-1]["type"] == "final" and recs[-1]["work_done"] == recs[-1]["work_total"] > 0, recs[-1]
PY
        [ $? -eq 0 ] && ok || bad "--residency $res: the live counters: $(cat "$T/check")"
    fi
done
expect 1 "Y\(1\), the TTM chain of mode 1, alone takes .* raise --mem-limit" -- "$tool" "$T/u.blco" --ranks 2x60x60 --mem-limit 40M

# ---- Y(n) in row blocks (--y-mem, and chosen by the tool under --mem-limit): the same fits
# as with every Y(n) whole, and the documented number of streamed passes ----
"$tool" "$T/u.blco" --rank 3 --iters 3 --tol 0 -q --out "$T/whole" >/dev/null 2>&1 \
    && ok || bad "whole-Y run failed"
expect 0 "Y\(1\) \(2997 x 9, .*\) is computed in 11 row blocks of 284 rows" -- \
    "$tool" "$T/u.blco" --rank 3 --iters 3 --tol 0 --y-mem 20K --out "$T/blocks"
same_fits() {
    awk -v a="$(sed -n 's/.*"fit_history":\[\([^]]*\)\].*/\1/p' "$1")" \
        -v b="$(sed -n 's/.*"fit_history":\[\([^]]*\)\].*/\1/p' "$2")" 'BEGIN {
        n = split(a, x, ","); m = split(b, y, ",")
        if (n != m || n == 0) exit 1
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-10) exit 1 }
    }'
}
same_fits "$T/whole/summary.json" "$T/blocks/summary.json" && ok || bad "blocked fits differ"
# the TTM chains on fiber copies (--fibers on; auto keeps this small tensor's, of short
# fibers, on the BLCO kernel): the same fits, every mode on its copy (said at -v), and
# blocks over copies too
expect 0 "mode 3: fiber copy" -- "$tool" "$T/u.blco" --rank 3 --iters 3 --tol 0 -v --fibers on \
    --out "$T/fib"
same_fits "$T/whole/summary.json" "$T/fib/summary.json" && ok || bad "fits on fiber copies differ"
"$tool" "$T/u.blco" --rank 3 --iters 1 -v >/dev/null 2>"$T/err.auto"
grep -q "fiber copy" "$T/err.auto" && bad "auto built a copy on a small tensor" || ok
# ... but builds them where fibers are long (the exact low-rank tensor: dense blocks)
expect 0 "mode 1: fiber copy, 0\.[0-9]* fibers per nonzero" -- "$tool" "$T/lr.blco" --rank 3 \
    --iters 2 -v
expect 0 "fit" -- "$tool" "$T/u.blco" --rank 3 --iters 3 --tol 0 --fibers on --y-mem 20K \
    --out "$T/fib-blocks"
same_fits "$T/whole/summary.json" "$T/fib-blocks/summary.json" && ok ||
    bad "row blocks on fiber copies: fits differ"
expect 2 "--fibers must be auto, on or off" -- "$tool" --rank 2 --fibers yes x.blco
# modes 2 and 3 (200 and 100 rows x 9 columns) fit whole: 3 x (22 + 1 + 1) calls
[ "$(json_num "$T/blocks/summary.json" ttm_calls)" = 72 ] && ok ||
    bad "ttm_calls $(json_num "$T/blocks/summary.json" ttm_calls), want 72"
expect 1 "Y\(1\).*even one row of it does not fit" -- "$tool" "$T/u.blco" --rank 3 --y-mem 64
"$gen" --dims 200000x50x40 --nnz 100K --seed 3 -o "$T/tall.blco" >/dev/null 2>&1 || bad "gen tall"
"$tool" "$T/tall.blco" --rank 8 --init random --iters 2 --tol 0 -q --out "$T/tall-whole" \
    >/dev/null 2>&1 && ok || bad "tall whole run failed"
expect 0 "Y\(1\) \(78739 x 64, 38.4 MiB\) is computed in [0-9]+ row blocks" -- "$tool" \
    "$T/tall.blco" --rank 8 --init random --iters 2 --tol 0 --mem-limit 40M --out "$T/tall-blocks"
same_fits "$T/tall-whole/summary.json" "$T/tall-blocks/summary.json" && ok ||
    bad "tall: blocked fits differ"

# ---- Y(n) with no more rows than columns (50 rows x 64 columns at rank 8) in column blocks:
# the same fits as whole, 4 blocks a mode, B passes a mode and 2B in the last ----
"$gen" --dims 50x50x50 --nnz 5K --seed 5 -o "$T/w.blco" >/dev/null 2>&1 || bad "gen w"
"$tool" "$T/w.blco" --rank 8 --iters 3 --tol 0 -q --out "$T/w-whole" >/dev/null 2>&1 \
    && ok || bad "wide whole run failed"
expect 0 "Y\(3\) \(50 x 64, .*\) is computed in 4 column blocks of 16 columns" -- \
    "$tool" "$T/w.blco" --rank 8 --iters 3 --tol 0 --y-mem 8K --out "$T/w-cols"
same_fits "$T/w-whole/summary.json" "$T/w-cols/summary.json" && ok || bad "column-block fits differ"
[ "$(json_num "$T/w-cols/summary.json" ttm_calls)" = 48 ] && ok ||
    bad "column blocks: ttm_calls $(json_num "$T/w-cols/summary.json" ttm_calls), want 48"
expect 1 "Y\(1\).*in column blocks .* at least" -- "$tool" "$T/w.blco" --rank 8 --y-mem 1K

# ---- killed after iteration 2, resumed: the same fit as a run without a kill ----
"$tool" "$T/u.blco" --rank 3 --init random --iters 4 --tol 0 -q --out "$T/straight" \
    >/dev/null 2>&1 && ok || bad "straight run failed"
BLCO_TUCKER_KILL_AFTER_ITER=2 "$tool" "$T/u.blco" --rank 3 --init random --iters 4 --tol 0 -q \
    --checkpoint "$T/ck" >/dev/null 2>&1
[ $? -eq 137 ] && ok || bad "the kill hook did not kill"
[ -s "$T/ck/state" ] && ok || bad "no checkpoint state after the kill"
expect 0 "" -- "$tool" "$T/u.blco" --rank 3 --iters 4 --tol 0 -q --checkpoint "$T/ck" \
    --resume --out "$T/resumed"
a=$(json_num "$T/straight/summary.json" fit)
b=$(json_num "$T/resumed/summary.json" fit)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "resumed fit $b, uninterrupted $a"

# ---- aminoacid at 3x3x3 against a dense numpy HOOI from the same start ----
py=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
amino=${BLCO_SHARED_DATA:-}/aminoacid.tns
if [ -n "$py" ] && [ -f "$amino" ]; then
    "$pack" "$amino" -o "$T/amino.blco" >/dev/null 2>&1 && ok || bad "packing aminoacid"
    mkdir -p "$T/init"
    "$py" - "$T/init" <<'EOF' && ok || bad "writing the start"
import sys, numpy as np
rng = np.random.default_rng(7)
for n, d in enumerate((5, 201, 61)):
    q, _ = np.linalg.qr(rng.standard_normal((d, 3)))
    np.save(f"{sys.argv[1]}/U{n + 1}.npy", q)
EOF
    expect 0 "" -- "$tool" "$T/amino.blco" --rank 3 --init "$T/init" --iters 8 --tol 0 -q \
        --out "$T/amino"
    "$py" - "$amino" "$T/init" "$T/amino/summary.json" <<'EOF' && ok || bad "aminoacid differs from numpy"
import sys, json, numpy as np
t = np.loadtxt(sys.argv[1])
idx = t[:, :3].astype(int) - 1
X = np.zeros(tuple(idx.max(axis=0) + 1))
np.add.at(X, tuple(idx.T), t[:, 3])
U = [np.load(f"{sys.argv[2]}/U{n + 1}.npy") for n in range(3)]
nx2 = (X ** 2).sum()
fits = []
for it in range(8):
    for n in range(3):
        Y = X
        for m in range(3):
            if m != n:
                Y = np.moveaxis(np.tensordot(Y, U[m], axes=([m], [0])), -1, m)
        Yn = np.moveaxis(Y, n, 0).reshape(X.shape[n], -1)
        U[n] = np.linalg.svd(Yn, full_matrices=False)[0][:, :3]
    G = np.tensordot(Yn.reshape((X.shape[2], 3, 3)), U[2], axes=([0], [0]))
    fits.append(1 - np.sqrt(max(0.0, nx2 - (G ** 2).sum())) / np.sqrt(nx2))
got = json.load(open(sys.argv[3]))["fit_history"]
diff = max(abs(a - b) for a, b in zip(fits, got))
print("numpy", fits[-1], "blco", got[-1], "max diff", diff)
sys.exit(0 if len(got) == 8 and diff <= 1e-6 else 1)
EOF
else
    echo "note: no python3 with numpy or no aminoacid.tns; the numpy comparison was skipped"
fi

finish
