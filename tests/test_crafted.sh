#!/bin/sh
# Damaged .blco files whose checksums were recomputed (issue 33), so that only the readers'
# own checks can catch them: a value decoded to infinity is refused by blco-info --verify,
# blco-mttkrp, blco-cpd and blco-cat, naming the segment and the value; a header whose
# norm2 was multiplied by 4 is refused by --verify and by blco-cpd after its first pass
# (it used to give a wrong fit with exit status 0).
# usage: test_crafted.sh CRAFT_BLCO BLCO-GEN BLCO-PACK BLCO-INFO BLCO-MTTKRP BLCO-CPD BLCO-CAT
set -u
craft=$1 gen=$2 pack=$3 info=$4 mttkrp=$5 cpd=$6 cat=$7
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

"$gen" --kind lowrank --rank 3 --dims 60x50x40 --nnz 5000 --seed 2 -q -o "$T/x.tns" &&
    "$pack" "$T/x.tns" --codec raw --segment-nnz 1024 -q -o "$T/x.blco" || bad "blco-gen | blco-pack"
"$craft" inf "$T/x.blco" "$T/inf.blco" || bad "craft inf"
"$craft" norm4 "$T/x.blco" "$T/norm4.blco" || bad "craft norm4"
expect 0 "verify        ok" -- "$info" --verify "$T/x.blco"

# a value that is not finite, behind a right checksum
for t in "$info --verify" "$mttkrp --rank 2" "$cpd --rank 2 --iters 2" "$cat"; do
    expect 1 "inf.blco: segment 0: value 0 \(nonzero 0\) is infinite; a .blco file holds finite values only" -- \
        $t "$T/inf.blco"
done
# the header's norm against the data
expect 1 "norm4.blco: the header's sum of squares .* does not match the data's" -- \
    "$info" --verify "$T/norm4.blco"
expect 1 "the header's sum of squares .* is not the data's .* \(a damaged header\): the fit would be wrong" -- \
    "$cpd" --rank 3 --iters 5 "$T/norm4.blco"
grep -q "converged\|stopped at --iters" "$T/out" && bad "a fit was reported: $(cat "$T/out")" || ok
for res in auto none; do
    expect 0 "" -- "$cpd" --rank 3 --iters 5 --residency $res -q "$T/x.blco"
done
finish
