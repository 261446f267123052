#!/bin/sh
# blco-info and blco-cat on the golden v1 files: facts, JSON, --verify verdicts and exit
# codes, and blco-cat giving back the .tns twin line for line.
# usage: test_blco_info_cat.sh BLCO-INFO BLCO-CAT GOLDEN-DIR
set -u
info=$1
cat=$2
g=$3
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

expect 0 "Usage: blco-info" -- "$info" --help
expect 0 "Usage: blco-cat" -- "$cat" --help
expect 2 "no file given" -- "$info"
expect 2 "--base must be 0 or 1" -- "$cat" --base 2 "$g/v1-good-auto.blco"
expect 0 "1000 x 500 x 64" -- "$info" "$g/v1-good-auto.blco"
expect 0 "verify        ok" -- "$info" --verify "$g/v1-good-auto.blco"
expect 0 '"verify":"ok"' -- "$info" --verify --json "$g/v1-good-raw-f32.blco"
expect 0 '"values":"f32"' -- "$info" --json "$g/v1-good-raw-f32.blco"
expect 0 "segment      offset" -- "$info" --segments "$g/v1-good-auto.blco"
if command -v python3 >/dev/null; then
    "$info" --json --verify "$g/v1-good-auto.blco" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["nnz"] > 0 and d["verify"] == "ok"' && ok || bad "JSON does not parse"
fi
expect 1 "not a .blco file" -- "$info" --verify "$g/v1-bad-magic.blco"
expect 1 "newer" -- "$info" "$g/v1-bad-newer-major.blco"
expect 1 "corrupt header" -- "$info" "$g/v1-bad-header-checksum.blco"
expect 1 "truncated" -- "$info" "$g/v1-bad-truncated.blco"
expect 1 "truncated" -- "$info" "$g/v1-bad-short.blco"
expect 1 "trailing data" -- "$info" "$g/v1-bad-trailing.blco"
expect 1 "block table" -- "$info" "$g/v1-bad-block-table.blco"
expect 0 "" -- "$info" "$g/v1-bad-segment-byte.blco"            # tables are fine
expect 1 "segment 0.*checksum" -- "$info" --verify "$g/v1-bad-segment-byte.blco"
expect 1 "segment 0.*checksum" -- "$cat" "$g/v1-bad-segment-byte.blco"
expect 1 "No such file" -- "$info" "$T/none.blco"

for t in v1-good-auto v1-good-raw-f32; do
    "$cat" "$g/$t.blco" >"$T/$t.tns" && grep -v '^#' "$g/$t.tns" | cmp -s - "$T/$t.tns" \
        && ok || bad "blco-cat $t differs from its .tns twin"
    "$cat" -o "$T/$t.out" "$g/$t.blco" && cmp -s "$T/$t.tns" "$T/$t.out" && ok || bad "-o $t"
done
expect 1 "exists" -- "$cat" -o "$T/v1-good-auto.out" "$g/v1-good-auto.blco"
expect 0 "" -- "$cat" --force -o "$T/v1-good-auto.out" "$g/v1-good-auto.blco"
# the output is the input: refused, --force or not, and the input stays whole
cp "$g/v1-good-auto.blco" "$T/self.blco"
expect 1 "self.blco is the input file .*self.blco itself" -- "$cat" "$T/self.blco" -o "$T/self.blco" --force
cmp -s "$T/self.blco" "$g/v1-good-auto.blco" && ok || bad "blco-cat -o INPUT --force wrote over it"
rm -f "$T/self.blco"
"$cat" --base 0 "$g/v1-good-auto.blco" | head -1 | awk '{exit !($1 >= 0)}' && ok || bad "--base 0"
[ -z "$(ls "$T" | grep tmp)" ] && ok || bad "temporary files left behind"

finish
