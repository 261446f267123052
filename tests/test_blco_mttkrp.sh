#!/bin/sh
# blco-mttkrp end to end: options, errors and exit codes, and the result of every mode
# against an independent numpy einsum on a tiny tensor with given factors.
# usage: test_blco_mttkrp.sh BLCO-MTTKRP DATA-DIR
set -u
tool=$1
data=$2
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

expect 0 "Usage: blco-mttkrp" -- "$tool" --help
expect 0 "blco-mttkrp [0-9]" -- "$tool" --version
expect 2 "no input tensor" -- "$tool"
expect 2 "unknown option|unrecognized" -- "$tool" --bogus x.tns
expect 2 "--rank must be between" -- "$tool" --rank 0 "$data/tiny3.tns"
expect 2 "--mem-limit" -- "$tool" --mem-limit 12Q "$data/tiny3.tns"
expect 1 "nope.tns: cannot open: No such file" -- "$tool" "$T/nope.tns"
printf '1 2 3 1.0\n4 5 6 2.0\n7 8 1.0\n' >"$T/badfields.tns"
expect 1 "badfields.tns:3:" -- "$tool" "$T/badfields.tns"
printf '1 2 3 1.0\n0 5 6 2.0\n' >"$T/zero.tns"
expect 1 "zero.tns:2:" -- "$tool" "$T/zero.tns"
expect 0 "mode 1" -- "$tool" --base auto "$T/zero.tns"
expect 2 "the tensor has 3 modes" -- "$tool" --mode 4 "$data/tiny3.tns"
expect 2 "--mode 0: the tensor has 3 modes, numbered 1 to 3" -- "$tool" --mode 0 "$data/tiny3.tns"
i=1; : >"$T/big.tns"
while [ $i -le 2000 ]; do echo "$i $((i % 7 + 1)) $((i % 5 + 1)) 1.5"; i=$((i + 1)); done >"$T/big.tns"
expect 1 "memory budget .* too small" -- "$tool" --mem-limit 16K "$T/big.tns"
expect 0 "max rel. error" -- "$tool" --check --iters 2 "$data/tiny3.tns"
# gzip or zstd text: packed into a temporary .blco (gone at the end) and streamed (issue 34);
# --base and --dims apply to it as to plain text
mkdir "$T/tmp"
for z in gzip zstd; do
    command -v $z >/dev/null 2>&1 || continue
    $z -c "$T/big.tns" >"$T/big.$z" 2>/dev/null || { bad "$z failed"; continue; }
    TMPDIR="$T/tmp" expect 0 "max rel. error" -- "$tool" --check --rank 3 "$T/big.$z"
    grep -q "big.$z is text: packing it into a temporary .blco in $T/tmp, deleted when done" \
        "$T/err" && grep -q "big.$z: 3 modes, 2000 x 7 x 5, 2000 nonzeros" "$T/err" && ok ||
        bad "$z text: $(cat "$T/err")"
    [ -z "$(ls -A "$T/tmp")" ] && ok || bad "$z text left $(ls -A "$T/tmp")"
    gzip -c "$T/zero.tns" >"$T/zero.gz"
    TMPDIR="$T/tmp" expect 1 "zero.gz:2:" -- "$tool" "$T/zero.gz"
    TMPDIR="$T/tmp" expect 0 "zero.gz: 3 modes, 7 x 8 x 9," -- "$tool" --base auto --dims 7x8x9 "$T/zero.gz"
done
expect 0 '"nnz_modes_per_second"' -- "$tool" --json --quiet --rank 3 "$data/tiny3.tns"
expect 0 "" -- "$tool" --quiet --kernel atomic --threads 1 --mode 2 "$data/tiny3.tns"
expect 0 "" -- "$tool" --quiet --kernel owner --threads 2 --check "$data/tiny3.tns"
printf '1 1 1 1\n1 1 1 2\n' >"$T/dup.tns"
expect 1 "duplicate" -- "$tool" --duplicates error "$T/dup.tns"
expect 0 "1 duplicates summed" -- "$tool" "$T/dup.tns"

# Results against numpy, with factors given as .npy files.
# The first python3 on PATH may lack numpy where Debian's has it.
py=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
if [ -n "$py" ]; then
    mkdir -p "$T/f"
    "$py" - "$T/f" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(3)
for n, d in enumerate([3, 4, 2]):
    np.save(f"{sys.argv[1]}/A{n+1}.npy", rng.standard_normal((d, 5)))
# Fortran order on purpose for one factor: the reader must convert it.
a = np.load(f"{sys.argv[1]}/A2.npy"); np.save(f"{sys.argv[1]}/A2.npy", np.asfortranarray(a))
PY
    expect 0 "" -- "$tool" --quiet --rank 5 --factors "$T/f" --out "$T/m" "$data/tiny3.tns"
    if "$py" - "$T/f" "$T/m" "$data/tiny3.tns" <<'PY'
import sys, numpy as np
f, m, path = sys.argv[1:]
A = [np.load(f"{f}/A{n}.npy") for n in (1, 2, 3)]
X = np.zeros((3, 4, 2))
for line in open(path):
    t = line.split()
    if not t or t[0].startswith('#'):
        continue
    X[int(t[0]) - 1, int(t[1]) - 1, int(t[2]) - 1] += float(t[3])
want = [np.einsum('ijk,jr,kr->ir', X, A[1], A[2]),
        np.einsum('ijk,ir,kr->jr', X, A[0], A[2]),
        np.einsum('ijk,ir,jr->kr', X, A[0], A[1])]
for n in range(3):
    got = np.load(f"{m}/M{n+1}.npy")
    if got.shape != want[n].shape or not np.allclose(got, want[n], rtol=1e-12, atol=1e-12):
        print(f"mode {n+1} differs:\n{got}\n{want[n]}", file=sys.stderr)
        sys.exit(1)
PY
    then ok; else bad "results differ from numpy"; fi
    expect 1 "A1.npy: shape 3 x 5, but mode 1 needs 3 x 4" -- "$tool" --rank 4 --factors "$T/f" "$data/tiny3.tns"
fi

[ -n "$py" ] || echo "note: no python3 with numpy; the numpy cross-check was skipped"
finish
