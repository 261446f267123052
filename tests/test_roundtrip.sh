#!/bin/sh
# The round trip of issue "blco-pack": .tns -> blco-pack -> blco-cat gives back the same
# set of (coordinates, value), duplicates summed, for the shared tensors and generated
# ones of orders 2..8, with length-1 modes and with more than 64 (up to 128) index bits.
# usage: test_roundtrip.sh BLCO-GEN BLCO-PACK BLCO-CAT [SHARED-DATA-DIR]
set -u
gen=$1
pack=$2
cat=$3
shared=${4:-}
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

# Exact comparison of two .tns files as sets, summing repeated coordinates of the first
# in file order (as the packer does, in ALTO order, so compare with a relative 1e-15).
same_set() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
def load(path, base):
    d = {}
    for line in open(path):
        t = line.split()
        if not t or t[0].startswith('#'):
            continue
        k = tuple(int(x) - base for x in t[:-1])
        d[k] = d.get(k, 0.0) + float(t[-1])
    return d
a, b = load(sys.argv[1], int(sys.argv[3])), load(sys.argv[2], 1)
if a.keys() != b.keys():
    print(f"coordinates differ: {len(a)} vs {len(b)}", file=sys.stderr); sys.exit(1)
bad = [k for k in a if abs(a[k] - b[k]) > 1e-15 * max(abs(a[k]), 1e-300)]
if bad:
    print(f"{len(bad)} values differ, e.g. {bad[0]}: {a[bad[0]]!r} vs {b[bad[0]]!r}", file=sys.stderr)
    sys.exit(1)
PY
}

check() { # check NAME FILE BASE [pack options...]
    name=$1; in=$2; base=$3; shift 3
    if "$pack" -q "$@" "$in" -o "$T/$name.blco" && "$cat" "$T/$name.blco" >"$T/$name.out" &&
        same_set "$in" "$T/$name.out" "$base"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL: round trip of $name ($*)" >&2
    fi
}

command -v python3 >/dev/null || { echo "python3 missing"; exit 77; }

if [ -n "$shared" ] && [ -d "$shared" ]; then
    for f in "$shared"/*.tns; do
        check "shared-$(basename "$f" .tns)" "$f" 1
    done
fi
i=0
for dims in 300x200 50x40x30 1x500x1x60 20x30x5x7x11 9x8x7x6x5x4 5x4x3x3x4x5x2 \
    6x5x4x3x3x4x5x2 4194304x4194304x2097152 18446744073709551615x1099511627776x16777216; do
    i=$((i + 1))
    "$gen" --quiet --kind powerlaw --skew 1.5 --dims "$dims" --nnz 3000 --seed $i -o "$T/g$i.tns"
    check "gen$i-$dims" "$T/g$i.tns" 1
    check "gen$i-$dims-spill" "$T/g$i.tns" 1 --mem-limit 60M --segment-nnz 256
done
# blco-gen -o X.blco packs directly: the same file content as text through blco-pack.
for kind in uniform powerlaw lowrank; do
    "$gen" --quiet --kind $kind --dims 300x200x100 --nnz 20000 --seed 9 -o "$T/d-$kind.tns"
    "$gen" --quiet --kind $kind --dims 300x200x100 --nnz 20000 --seed 9 -o "$T/d-$kind.blco"
    if "$pack" -q --dims 300x200x100 "$T/d-$kind.tns" -o "$T/d-$kind-p.blco" &&
        "$cat" "$T/d-$kind.blco" >"$T/d1" && "$cat" "$T/d-$kind-p.blco" >"$T/d2" &&
        cmp -s "$T/d1" "$T/d2"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL: blco-gen -o .blco ($kind) differs from blco-pack" >&2
    fi
done

# Dense enough to repeat coordinates: the duplicates are summed on the way.
"$gen" --quiet --kind uniform --dims 20x20x20 --nnz 20000 --seed 7 -o "$T/dup.tns"
check dups "$T/dup.tns" 1
check dups-f "$T/dup.tns" 1 --codec zstd
check dups-raw "$T/dup.tns" 1 --codec raw --dims 20x20x20
awk '{ printf "%d %d %d %s\n", $1 - 1, $2 - 1, $3 - 1, $4 }' "$T/dup.tns" >"$T/dup0.tns"
check dups-base0 "$T/dup0.tns" 0 --base 0

finish
