#!/bin/sh
# blco-mttkrp --ttv end to end: options and errors; the streamed TTV (within a small
# --mem-limit, nothing resident) and the in-memory one against blco_ttv_naive (--check) and
# against numpy on a generated 4-mode tensor and on ../shared/data/splatt-med5.tns, with
# vectors read from .npy (1-D and (I, 1) shapes), and on a file packed with --reorder.
# Without numpy the oracle comparisons cannot run: the other checks do, then the test
# reports a skip (77).
# usage: test_blco_ttv.sh BLCO-MTTKRP BLCO-GEN BLCO-PACK
set -u
tool=$1
gen=$2
pack=$3
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

# ---- help and usage errors ----
expect 0 "Usage: blco-mttkrp" -- "$tool" --help
for word in --ttv --vectors v1.npy y1.npy; do
    grep -q -- "$word" "$T/out" && ok || bad "--help does not mention $word"
done
expect 2 "drop --rank" -- "$tool" --ttv --rank 3 x.blco
expect 2 "not --factors" -- "$tool" --vectors "$T" --factors "$T" x.blco

"$gen" --kind powerlaw --dims 300x200x100x50 --nnz 20K --seed 5 -o "$T/g.tns" >/dev/null 2>&1 \
    && ok || bad "blco-gen failed"
"$pack" "$T/g.tns" -o "$T/g.blco" --segment-nnz 1024 >/dev/null 2>&1 && ok || bad "pack failed"

# ---- random vectors: the streamed and the in-memory TTV against blco_ttv_naive ----
expect 0 '"operation":"ttv"' -- "$tool" "$T/g.blco" --ttv --check --json --residency none \
    --mem-limit 24M --io pread
expect 0 "TTV, rank 1" -- "$tool" "$T/g.tns" --ttv --check --threads 2
grep -q MISMATCH "$T/out" && bad "in-memory TTV differs from blco_ttv_naive" || ok
expect 0 "" -- "$tool" "$T/g.blco" --ttv --check -q --kernel atomic --mode 3

# ---- a missing or misshapen vector ----
mkdir -p "$T/nov"
expect 1 "v1.npy" -- "$tool" "$T/g.blco" --vectors "$T/nov"

py=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
    echo "note: no python3 with numpy: the numpy oracle comparisons were skipped"
    finish || exit 1
    exit 77
fi

# vecs DIR DIMS..: v1.npy.. of those lengths, odd modes 1-D, even modes (I, 1)
vecs() {
    "$py" - "$@" <<'EOF'
import sys, numpy as np
d, dims = sys.argv[1], [int(x) for x in sys.argv[2:]]
rng = np.random.default_rng(11)
for n, i in enumerate(dims):
    v = rng.standard_normal(i)
    np.save(f"{d}/v{n + 1}.npy", v if n % 2 == 0 else v.reshape(i, 1))
EOF
}

# compare TNS VECS OUT ORDER: every mode's y against a numpy TTV from the text
compare() {
    "$py" - "$@" <<'EOF'
import sys, numpy as np
t = np.loadtxt(sys.argv[1], ndmin=2)
N = int(sys.argv[4])
idx = t[:, :N].astype(np.int64) - 1
val = t[:, N]
v = [np.load(f"{sys.argv[2]}/v{n + 1}.npy").reshape(-1) for n in range(N)]
worst = 0.0
for n in range(N):
    w = val.copy()
    for m in range(N):
        if m != n:
            w = w * v[m][idx[:, m]]
    want = np.zeros(v[n].shape[0])
    np.add.at(want, idx[:, n], w)
    got = np.load(f"{sys.argv[3]}/y{n + 1}.npy")
    if got.shape != (want.shape[0], 1):
        print("mode", n + 1, "shape", got.shape); sys.exit(1)
    err = np.abs(got[:, 0] - want).max() / max(np.abs(want).max(), 1e-300)
    worst = max(worst, err)
print("max relative error vs numpy", worst)
sys.exit(0 if worst <= 1e-12 else 1)
EOF
}

# ---- the generated tensor: streamed (small budget, nothing resident) and in memory ----
mkdir -p "$T/gv"
vecs "$T/gv" 300 200 100 50 && ok || bad "writing vectors"
expect 0 "" -- "$tool" "$T/g.blco" --vectors "$T/gv" -q --residency none --mem-limit 24M \
    --out "$T/gs"
compare "$T/g.tns" "$T/gv" "$T/gs" 4 && ok || bad "streamed TTV differs from numpy"
expect 0 "" -- "$tool" "$T/g.tns" --vectors "$T/gv" -q --out "$T/gm"
compare "$T/g.tns" "$T/gv" "$T/gm" 4 && ok || bad "in-memory TTV differs from numpy"
# a file packed with --reorder: vectors in and y out stay in the source's indices
"$pack" "$T/g.tns" -o "$T/gr.blco" --reorder freq >/dev/null 2>&1 && ok || bad "pack --reorder"
expect 0 "" -- "$tool" "$T/gr.blco" --vectors "$T/gv" -q --out "$T/gr"
compare "$T/g.tns" "$T/gv" "$T/gr" 4 && ok || bad "TTV of the relabeled file differs from numpy"
# a vector of the wrong length
"$py" -c "import numpy as np; np.save('$T/gv/v2.npy', np.ones(7))"
expect 1 "v2.npy: shape 7 x 1, but mode 2 needs a vector of 200 entries" -- \
    "$tool" "$T/g.blco" --vectors "$T/gv"

# ---- a real 5-mode tensor from ../shared/data ----
med5=${BLCO_SHARED_DATA:-}/splatt-med5.tns
if [ -f "$med5" ]; then
    "$pack" "$med5" -o "$T/med5.blco" >/dev/null 2>&1 && ok || bad "packing splatt-med5"
    mkdir -p "$T/mv"
    vecs "$T/mv" 60114 83826 23034 1132 100 && ok || bad "writing vectors"
    expect 0 "" -- "$tool" "$T/med5.blco" --vectors "$T/mv" -q --out "$T/mo"
    compare "$med5" "$T/mv" "$T/mo" 5 && ok || bad "splatt-med5 TTV differs from numpy"
else
    echo "note: no splatt-med5.tns in BLCO_SHARED_DATA: that comparison was skipped"
fi

finish
