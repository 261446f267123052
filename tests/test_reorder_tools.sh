#!/bin/sh
# blco-pack --reorder end to end: a relabeled file packed from a pipe holds the same tensor
# (blco-cat), blco-info shows the order, and every tool that reads or writes factors gives
# the same results (to 1e-12 relative, with numpy) as on the plain file: blco-mttkrp with
# random and --factors inputs, blco-cpd with random and --init starts, its checkpoints and
# a killed, resumed run; blco-tucker's factors.
# usage: test_reorder_tools.sh BLCO-PACK BLCO-GEN BLCO-CAT BLCO-INFO BLCO-MTTKRP BLCO-CPD BLCO-TUCKER
set -u
pack=$1 gen=$2 cat_=$3 info=$4 mttkrp=$5 cpd=$6 tucker=$7
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

expect 0 "--reorder O" -- "$pack" --help
expect 2 "--reorder: 'bogus' is not one of none, freq" -- "$pack" --reorder bogus x.tns -o y.blco

"$gen" --kind powerlaw --skew 1.5 --dims 3000x500x40 --nnz 20000 --seed 4 -q -o "$T/x.tns" ||
    bad "blco-gen failed"
expect 0 "" -- "$pack" -q "$T/x.tns" -o "$T/plain.blco"
# from a pipe: counted on the coordinates kept while reading, the input read once
cat "$T/x.tns" | "$pack" - --reorder freq -o "$T/freq.blco" >"$T/out" 2>"$T/err" &&
    grep -q "relabeled modes 1,2,3 by freq" "$T/err" && ok ||
    bad "pack --reorder freq from a pipe: $(cat "$T/err")"
expect 0 "format +.blco 1.1" -- "$info" "$T/freq.blco"
grep -Eq "relabeled +by freq .*modes 1 2 3" "$T/out" && ok ||
    bad "blco-info: $(cat "$T/out")"
expect 0 "format +.blco 1.0" -- "$info" "$T/plain.blco"
grep -Eq "relabeled +no" "$T/out" && ok || bad "blco-info plain: $(cat "$T/out")"
expect 0 '"reorder":"freq","relabeled_modes":\[1,2,3\]' -- "$info" --json "$T/freq.blco"
expect 0 "verify +ok" -- "$info" --verify "$T/freq.blco"

"$cat_" "$T/plain.blco" | sort >"$T/a.tns"
"$cat_" "$T/freq.blco" | sort >"$T/b.tns"
[ -s "$T/a.tns" ] && cmp -s "$T/a.tns" "$T/b.tns" && ok ||
    bad "blco-cat of the relabeled file differs from the plain file's"

# ---- results in the source's indices ----
expect 0 "" -- "$mttkrp" -q -r 5 --seed 3 --out "$T/m-plain" "$T/plain.blco"
expect 0 "" -- "$mttkrp" -q -r 5 --seed 3 --out "$T/m-freq" "$T/freq.blco"
expect 0 "" -- "$cpd" -q -r 4 --iters 4 --tol 0 --out "$T/c-plain" "$T/plain.blco"
expect 0 "" -- "$cpd" -q -r 4 --iters 4 --tol 0 --out "$T/c-freq" "$T/freq.blco"
# killed after iteration 2 (test hook), resumed: the relabeled run's checkpoint holds the
# source's rows, and the resumed run ends where the plain run does
BLCO_CPD_KILL_AFTER_ITER=2 "$cpd" -q -r 4 --iters 4 --tol 0 --checkpoint "$T/ck" \
    "$T/freq.blco" >/dev/null 2>&1
cp -r "$T/ck" "$T/ck2"
expect 0 "" -- "$cpd" -q -r 4 --iters 4 --tol 0 --checkpoint "$T/ck" --resume \
    --out "$T/c-resumed" "$T/freq.blco"
BLCO_CPD_KILL_AFTER_ITER=2 "$cpd" -q -r 4 --iters 4 --tol 0 --checkpoint "$T/ck-plain" \
    "$T/plain.blco" >/dev/null 2>&1
expect 0 "" -- "$tucker" -q --rank 3 --iters 3 --tol 0 --out "$T/t-plain" "$T/plain.blco"
expect 0 "" -- "$tucker" -q --rank 3 --iters 3 --tol 0 --out "$T/t-freq" "$T/freq.blco"

py=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
if [ -n "$py" ]; then
    # given factors and starts (random rows, the same for both files)
    "$py" -c "import numpy as np, sys
r = np.random.default_rng(7)
for n, d in enumerate((3000, 500, 40)):
    for k, name in ((5, 'A'), (4, 'I')):
        np.save(f'{sys.argv[1]}/{name}{n + 1}.npy', r.random((d, k)))" "$T" || bad "numpy"
    mkdir -p "$T/fac" "$T/init"
    for n in 1 2 3; do mv "$T/A$n.npy" "$T/fac/A$n.npy"; mv "$T/I$n.npy" "$T/init/A$n.npy"; done
    expect 0 "" -- "$mttkrp" -q -r 5 --factors "$T/fac" --out "$T/mf-plain" "$T/plain.blco"
    expect 0 "" -- "$mttkrp" -q -r 5 --factors "$T/fac" --out "$T/mf-freq" "$T/freq.blco"
    expect 0 "" -- "$cpd" -q -r 4 --iters 3 --tol 0 --init "$T/init" --out "$T/ci-plain" \
        "$T/plain.blco"
    expect 0 "" -- "$cpd" -q -r 4 --iters 3 --tol 0 --init "$T/init" --out "$T/ci-freq" \
        "$T/freq.blco"
    "$py" - "$T" <<'EOF' && ok || bad "results differ between the relabeled and plain files"
import glob, os, sys
import numpy as np
T = sys.argv[1]
pairs = [("m-plain", "m-freq", "M"), ("mf-plain", "mf-freq", "M"), ("c-plain", "c-freq", "A"),
         ("c-plain", "c-resumed", "A"), ("ci-plain", "ci-freq", "A"), ("t-plain", "t-freq", "U")]
bad = 0
for a, b, p in pairs:
    for n in (1, 2, 3):
        x = np.load(f"{T}/{a}/{p}{n}.npy")
        y = np.load(f"{T}/{b}/{p}{n}.npy")
        if p == "U":  # singular vectors: up to sign per column
            y = y * np.sign((x * y).sum(axis=0))
        e = np.abs(x - y).max() / np.abs(x).max()
        if not e <= 1e-12:
            print(f"{a} vs {b}: {p}{n} differs by {e:.3g}", file=sys.stderr)
            bad += 1
# the checkpoints of iteration 2: the same rows, in the source's indices
ca = sorted(glob.glob(f"{T}/ck-plain/iter-000002.*"))
cb = sorted(glob.glob(f"{T}/ck2/iter-000002.*"))
if not ca or not cb:
    print("no checkpoint of iteration 2", file=sys.stderr)
    bad += 1
else:
    for n in (1, 2, 3):
        x = np.load(f"{ca[0]}/A{n}.npy")
        y = np.load(f"{cb[0]}/A{n}.npy")
        e = np.abs(x - y).max() / np.abs(x).max()
        if not e <= 1e-12:
            print(f"checkpoint A{n} differs by {e:.3g}", file=sys.stderr)
            bad += 1
sys.exit(1 if bad else 0)
EOF
else
    echo "note: no python3 with numpy; the numeric comparisons were skipped"
fi
finish
