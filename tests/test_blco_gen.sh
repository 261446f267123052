#!/bin/sh
# blco-gen end to end: options and exit codes, clear errors, output identical across
# --threads, temp files never left behind, and output that reads back as valid .tns.
# Usage: test_blco_gen.sh path/to/blco-gen [path/to/blco-pack]
GEN=$1 PACK=${2:-}
[ -x "$GEN" ] || { echo "usage: $0 path/to/blco-gen" >&2; exit 1; }
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

# expect STATUS PATTERN -- ARGS...: runs blco-gen with ARGS, checks the exit status and that
# standard error matches PATTERN (a grep -E regex, empty for no check).
expect() {
    want=$1 pat=$2
    shift 3
    expect_run "$want" "$pat" err -- "$GEN" "$@"
}

no_temps() {
    if ls -a "$T" | grep -q '\.tmp\.'; then
        bad "$1: temp file left behind: $(ls -a "$T" | grep '\.tmp\.')"
    else
        ok
    fi
}

# ---- help, version, usage errors (exit 2) ----
"$GEN" --help >"$T/help" 2>&1 && ok || bad "--help failed"
for word in Usage --kind --dims --nnz --seed --skew --rank --threads --quiet Examples uniform \
            powerlaw lowrank default; do
    grep -q -- "$word" "$T/help" && ok || bad "--help does not mention $word"
done
"$GEN" -h | cmp -s - "$T/help" && ok || bad "-h differs from --help"
"$GEN" --version | grep -Eq '^blco-gen .*[0-9]+\.[0-9]+' && ok || bad "--version"

expect 2 '^blco-gen: .*--dims' --
expect 2 '^blco-gen: .*--nnz' -- --dims 10x10 -o "$T/a.tns"
expect 2 '^blco-gen: .*-o' -- --dims 10x10 --nnz 5
expect 2 'at least 2 modes' -- --dims 10 --nnz 5 -o "$T/a.tns"
expect 2 'positive' -- --dims 10x0x4 --nnz 5 -o "$T/a.tns"
expect 2 'not like' -- --dims 10xfoo --nnz 5 -o "$T/a.tns"
expect 2 '--nnz' -- --dims 10x10 --nnz abc -o "$T/a.tns"
expect 2 '--nnz' -- --dims 10x10 --nnz 0 -o "$T/a.tns"
expect 2 '--nnz' -- --dims 10x10 --nnz 5Q -o "$T/a.tns"
expect 2 'not one of' -- --kind gaussian --dims 10x10 --nnz 5 -o "$T/a.tns"
expect 2 '--seed' -- --seed -4 --dims 10x10 --nnz 5 -o "$T/a.tns"
expect 2 'powerlaw only' -- --skew 2 --dims 10x10 --nnz 5 -o "$T/a.tns"
expect 2 'between 1' -- --kind powerlaw --skew 0.5 --dims 10x10 --nnz 5 -o "$T/a.tns"
expect 2 'one per mode' -- --kind powerlaw --skew 2,3 --dims 10x10x10 --nnz 5 -o "$T/a.tns"
expect 2 '4 values for 3 modes' -- --kind powerlaw --skew 2,3,1,1 --dims 10x10x10 --nnz 5 \
    -o "$T/a.tns"
expect 2 'not a number' -- --kind powerlaw --skew x --dims 10x10 --nnz 5 -o "$T/a.tns"
expect 2 'lowrank only' -- --rank 4 --dims 10x10 --nnz 5 -o "$T/a.tns"
expect 2 '--rank' -- --kind lowrank --rank 0 --dims 10x10 --nnz 5 -o "$T/a.tns"
expect 2 '--threads' -- --threads 0 --dims 10x10 --nnz 5 -o "$T/a.tns"
expect 2 'must end in .tns or .blco' -- --dims 10x10 --nnz 5 -o "$T/a.txt"
expect 2 'applies to .blco output only' -- --dims 10x10 --nnz 5 --mem-limit 1G -o "$T/a.tns"
expect 1 'do not fit the memory budget' -- --dims 1000x1000 --nnz 1M --mem-limit 4M -o "$T/a.blco"
[ ! -e "$T/a.blco" ] && ok || bad "a refused .blco output was created"
expect 2 'must end in .tns' -- --dims 10x10 --nnz 5 -o "$T/a.txt"
expect 2 'unknown option' -- --bogus --dims 10x10 --nnz 5 -o "$T/a.tns"
expect 2 'unknown option' -- -Z --dims 10x10 --nnz 5 -o "$T/a.tns"
expect 2 'needs a value' -- --dims 10x10 --nnz 5 -o
expect 2 'unexpected argument' -- --dims 10x10 --nnz 5 -o "$T/a.tns" extra
[ ! -e "$T/a.tns" ] && ok || bad "a usage error created the output"

# ---- runtime errors (exit 1), nothing left behind ----
expect 1 'lowrank.*(rank|nonzeros)' -- --kind lowrank --rank 8 --dims 100x5x100 --nnz 1000 \
    -o "$T/lr.tns"
expect 1 'at most .* nonzeros' -- --kind lowrank --rank 2 --dims 10x10 --nnz 1000 -o "$T/lr.tns"
[ ! -e "$T/lr.tns" ] && ok || bad "failed lowrank run left an output"
no_temps "after the runs above"
expect 1 "$T/no/such/dir/x.tns" -- --dims 10x10 --nnz 5 -o "$T/no/such/dir/x.tns"
mkdir "$T/d.tns"
expect 1 'is a directory' -- --dims 10x10 --nnz 5 -o "$T/d.tns"
if [ -w /dev/full ]; then
    "$GEN" --dims 100x100 --nnz 100000 -o - >/dev/full 2>"$T/err"
    st=$?
    [ "$st" -eq 1 ] && grep -q 'standard output.*No space left' "$T/err" && ok ||
        bad "full disk: status $st, $(cat "$T/err")"
fi
if [ "$(id -u)" -ne 0 ]; then
    mkdir "$T/ro" && chmod 555 "$T/ro"
    expect 1 "$T/ro/x.tns.*Permission denied" -- --dims 10x10 --nnz 5 -o "$T/ro/x.tns"
    chmod 755 "$T/ro"
fi
# An existing output survives a failed run untouched.
echo "keep me" >"$T/keep.tns"
expect 1 '' -- --kind lowrank --rank 50 --dims 10x10 --nnz 100 -o "$T/keep.tns"
[ "$(cat "$T/keep.tns")" = "keep me" ] && ok || bad "failed run damaged the existing output"

# ---- output: determinism, format, contents ----
check_tns() { # FILE ORDER NNZ DIMS-SPACE-SEPARATED: field count, index range, value range
    awk -v order="$2" -v nnz="$3" -v dims="$4" '
        BEGIN { n = split(dims, d, " ") }
        NF != order + 1 { print "line " NR ": " NF " fields"; bad = 1; exit }
        {
            for (m = 1; m <= order; m++)
                if ($m !~ /^[0-9]+$/ || $m < 1 || $m > d[m]) {
                    print "line " NR ": index " $m; bad = 1; exit
                }
            v = $(order + 1) + 0
            if (!(v > 0 && v <= 3.375)) { print "line " NR ": value " $(order + 1); bad = 1; exit }
        }
        END {
            if (!bad && nnz > 0 && NR != nnz) { print NR " lines, expected " nnz; bad = 1 }
            exit bad
        }' "$1"
}

for kind in uniform powerlaw lowrank; do
    extra=
    [ $kind = powerlaw ] && extra="--skew 3,1,2"
    [ $kind = lowrank ] && extra="--rank 4"
    for t in 1 2 3; do
        "$GEN" --kind $kind $extra --dims 300x200x100 --nnz 200k --seed 5 --threads $t --quiet \
            -o "$T/$kind.$t.tns" 2>"$T/err"
        [ $? -eq 0 ] && [ ! -s "$T/err" ] && ok || bad "$kind --threads $t: $(cat "$T/err")"
    done
    cmp -s "$T/$kind.1.tns" "$T/$kind.2.tns" && ok || bad "$kind: threads 1 vs 2 differ"
    cmp -s "$T/$kind.1.tns" "$T/$kind.3.tns" && ok || bad "$kind: threads 1 vs 3 differ"
    "$GEN" --kind $kind $extra --dims 300x200x100 --nnz 200k --seed 5 -q -o - >"$T/$kind.stdout"
    cmp -s "$T/$kind.1.tns" "$T/$kind.stdout" && ok || bad "$kind: stdout differs from file"
    "$GEN" --kind $kind $extra --dims 300x200x100 --nnz 200k --seed 6 -q -o "$T/$kind.s6.tns"
    cmp -s "$T/$kind.1.tns" "$T/$kind.s6.tns" && bad "$kind: seeds 5 and 6 give the same output" ||
        ok
    want=200000
    [ $kind = lowrank ] && want=0
    msg=$(check_tns "$T/$kind.1.tns" 3 $want "300 200 100") && ok || bad "$kind: $msg"
done
# Low rank: no repeated coordinate, count near the target.
dups=$(cut -d' ' -f1-3 "$T/lowrank.1.tns" | sort | uniq -d | wc -l)
[ "$dups" -eq 0 ] && ok || bad "lowrank: $dups repeated coordinates"
lines=$(wc -l <"$T/lowrank.1.tns")
[ "$lines" -ge 190000 ] && [ "$lines" -le 210000 ] && ok || bad "lowrank: $lines lines for 200k"
# Power law: the heaviest mode-1 slice is far above the uniform share (200000/300 = 667).
top=$(cut -d' ' -f1 "$T/powerlaw.1.tns" | sort | uniq -c | sort -rn | head -1 | awk '{print $1}')
[ "$top" -gt 5000 ] && ok || bad "powerlaw: heaviest slice only $top"
# Exact count, 2 and 6 modes, suffixes.
"$GEN" --dims 7x3 --nnz 1.5k -q -o "$T/two.tns" && [ "$(wc -l <"$T/two.tns")" -eq 1500 ] && ok ||
    bad "1.5k gives 1500 lines"
msg=$(check_tns "$T/two.tns" 2 1500 "7 3") && ok || bad "2 modes: $msg"
"$GEN" --dims 2x3x4x5x6x7 --nnz 1000 -q -o "$T/six.tns" && ok || bad "6 modes"
msg=$(check_tns "$T/six.tns" 6 1000 "2 3 4 5 6 7") && ok || bad "6 modes: $msg"

# Values read back exactly: every value printed again by a correctly rounding printf and
# compared numerically (awk reads with strtod).
if command -v python3 >/dev/null 2>&1; then
    python3 - "$T/uniform.1.tns" <<'EOF' && ok || bad "values are not shortest round-trip"
import sys
n = 0
for line in open(sys.argv[1]):
    f = line.split()
    v = float(f[-1])
    assert 0 < v <= 1, line
    digits = f[-1].split('e')[0].replace('.', '').lstrip('0')
    assert 1 <= len(digits) <= 17, line
    n += 1
assert n == 200000, n
EOF
fi

# ---- summary and quiet ----
"$GEN" --dims 50x50 --nnz 1000 -o "$T/s.tns" 2>"$T/err" && ok || bad "summary run"
grep -Eq '^blco-gen: wrote 1000 nonzeros.*bytes.*s \(.*MB/s\)' "$T/err" && ok ||
    bad "summary: $(cat "$T/err")"
size=$(wc -c <"$T/s.tns")
grep -q "($size bytes)" "$T/err" && ok || bad "summary byte count vs $size: $(cat "$T/err")"
"$GEN" --dims 50x50 --nnz 1000 --quiet -o "$T/s.tns" 2>"$T/err" && [ ! -s "$T/err" ] && ok ||
    bad "--quiet printed: $(cat "$T/err")"
no_temps "after the runs above"

# ---- an interrupted run removes its temp file ----
"$GEN" --dims 100000x100000x100000 --nnz 2G -q -o "$T/big.tns" &
pid=$!
wait_caught $pid
sleep 1
kill -TERM $pid 2>/dev/null
{ wait $pid; } 2>/dev/null
[ ! -e "$T/big.tns" ] && ok || bad "interrupted run left the output"
no_temps "after the runs above"

# -o X.blco is byte for byte blco-pack of the same tensor's text with the same --dims
# (header included: the text is 1-based, and so is the recorded source base).
if [ -n "$PACK" ]; then
    for kind in uniform "powerlaw --skew 1.5" "lowrank --rank 3"; do
        $GEN --kind $kind --dims 300x200x100 --nnz 40K --seed 9 -q -o "$T/direct.blco" &&
            $GEN --kind $kind --dims 300x200x100 --nnz 40K --seed 9 -q -o "$T/text.tns" &&
            $PACK "$T/text.tns" --dims 300x200x100 --force -o "$T/packed.blco" 2>/dev/null ||
            bad "--kind $kind: making the files failed"
        cmp -s "$T/direct.blco" "$T/packed.blco" && ok ||
            bad "--kind $kind: -o X.blco differs from blco-pack of the text: $(cmp "$T/direct.blco" "$T/packed.blco")"
    done
fi

finish
