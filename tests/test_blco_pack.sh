#!/bin/sh
# blco-pack end to end: options and exit codes, identical output from a file, standard
# input, every memory limit and (modes gzip, zstd) compressed input; errors that name the
# file and line or the path; outputs refused and untouched; full disks and read-only
# directories (in a private mount namespace when the system allows one); SIGTERM and
# SIGINT stopping a pack with nothing left behind.
# Usage: test_blco_pack.sh path/to/blco-pack path/to/blco-gen tests/data [main|gzip|zstd]
#        [path/to/blco-info, to verify outputs independently]
PACK=$1 GEN=$2 DATA=$3 MODE=${4:-main} INFO=${5:-}
[ -x "$PACK" ] && [ -x "$GEN" ] ||
    { echo "usage: $0 blco-pack blco-gen data-dir [mode]" >&2; exit 1; }
case $MODE in
gzip) command -v gzip >/dev/null 2>&1 || { echo "gzip not installed: skipped"; exit 77; } ;;
zstd) command -v zstd >/dev/null 2>&1 || { echo "zstd not installed: skipped"; exit 77; } ;;
esac
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

# expect STATUS PATTERN -- ARGS...: runs blco-pack with ARGS, checks the exit status and that
# standard error matches PATTERN (a grep -E regex, empty for no check).
expect() {
    want=$1 pat=$2
    shift 3
    expect_run "$want" "$pat" err -- "$PACK" "$@"
}

same() { # same A B WHAT: two .blco files must be byte-identical
    if cmp -s "$1" "$2"; then ok; else bad "$3: $1 and $2 differ"; fi
}

no_temps() {
    if ls -a "$1" | grep -q '\.tmp\.\|spill'; then
        bad "$2: left behind: $(ls -a "$1" | grep '\.tmp\.\|spill')"
    else
        ok
    fi
}

json_field() { # json_field FILE NAME: a numeric field of the --json summary
    sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1"
}

# A tensor with repeated coordinates, big enough to spill under a small limit. Integer
# values make the sums of duplicates exact, so every route must give the same bytes.
"$GEN" --dims 300x200x100 --nnz 300000 --seed 5 -o "$T/f.tns" -q ||
    { echo "blco-gen failed"; exit 1; }
awk '{ $4 = int($4 * 1000) + 1; print }' "$T/f.tns" >"$T/a.tns"
"$PACK" "$T/a.tns" -o "$T/ref.blco" --json -q >"$T/ref.json" 2>"$T/err" ||
    { echo "reference pack failed: $(cat "$T/err")"; exit 1; }
nnz=$(json_field "$T/ref.json" nnz)
dups=$(json_field "$T/ref.json" duplicates)
[ "$nnz" -gt 0 ] && [ "$dups" -gt 0 ] && [ $((nnz + dups)) -eq 300000 ] && ok ||
    bad "reference: nnz $nnz + duplicates $dups should be 300000"

if [ "$MODE" = gzip ] || [ "$MODE" = zstd ]; then
    if [ "$MODE" = gzip ]; then
        gzip -c "$T/a.tns" >"$T/a.tns.gz" && ok || bad "gzip"
        Z="$T/a.tns.gz"
        # concatenated members decode as one stream
        head -c 1000000 "$T/a.tns" | gzip -c >"$T/cat.gz"
        tail -c +1000001 "$T/a.tns" | gzip -c >>"$T/cat.gz"
        expect 0 '' -- "$T/cat.gz" -o "$T/cat.blco" -q
        same "$T/cat.blco" "$T/ref.blco" "concatenated gzip members"
    else
        zstd -q -c "$T/a.tns" >"$T/a.tns.zst" && ok || bad "zstd"
        Z="$T/a.tns.zst"
        zstd -q -3 --long=24 -c "$T/a.tns" >"$T/long.zst"
        expect 0 '' -- "$T/long.zst" -o "$T/long.blco" -q
        same "$T/long.blco" "$T/ref.blco" "zstd with a 16 MiB window"
    fi
    expect 0 '' -- "$Z" -o "$T/z.blco" -q
    same "$T/z.blco" "$T/ref.blco" "$MODE input"
    expect 0 '' -- "$Z" -o "$T/zs.blco" -q -m 10M --segment-nnz 1024 --json
    [ "$(json_field "$T/out" runs)" -gt 1 ] && ok ||
        bad "$MODE input did not spill: $(cat "$T/out")"
    "$PACK" "$T/a.tns" -o "$T/refs.blco" -q --segment-nnz 1024 2>/dev/null
    same "$T/zs.blco" "$T/refs.blco" "$MODE input, spilled"
    "$PACK" - -o "$T/zin.blco" -q <"$Z" && same "$T/zin.blco" "$T/ref.blco" "$MODE stdin" ||
        bad "$MODE stdin failed"
    # truncated and corrupt compressed input: clear errors, no output
    head -c 20000 "$Z" >"$T/trunc.z"
    expect 1 'ends early|truncated|corrupt' -- "$T/trunc.z" -o "$T/trunc.blco"
    [ ! -e "$T/trunc.blco" ] && ok || bad "truncated $MODE input left an output"
    { head -c 30000 "$Z"; head -c 30000 /dev/urandom; } >"$T/junk.z"
    expect 1 'corrupt|ends early' -- "$T/junk.z" -o "$T/junk.blco"
    no_temps "$T" "compressed errors"
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit
fi

# ---- help, version, usage errors (exit 2) ----
"$PACK" --help >"$T/help" 2>&1 && ok || bad "--help failed"
for word in Usage --output --dims --base --duplicates --mem-limit --tmpdir --threads --codec \
            --zstd-level --values --segment-nnz --force --quiet --json Examples gzip zstd \
            SIGTERM "Exit status" default; do
    grep -q -- "$word" "$T/help" && ok || bad "--help does not mention $word"
done
# (the last line, the default limit, depends on the memory free at that moment)
"$PACK" -h | sed '$d' | cmp -s - "$T/help.static" 2>/dev/null ||
    { sed '$d' "$T/help" >"$T/help.static"; "$PACK" -h | sed '$d' | cmp -s - "$T/help.static"; } &&
    ok || bad "-h differs from --help"
grep -q 'default --mem-limit here and now: [0-9.]* [KMGT]iB' "$T/help" && ok ||
    bad "--help: no default limit"
"$PACK" --version | grep -Eq '^blco-pack .*[0-9]+\.[0-9]+' && ok || bad "--version"
expect 2 'input is required' -- -o "$T/x.blco"
expect 2 '-o OUT.blco' -- "$T/a.tns"
expect 2 'must end in .blco' -- "$T/a.tns" -o "$T/x.tns"
expect 2 'not one of 0, 1, auto' -- "$T/a.tns" -o "$T/x.blco" --base 2
expect 2 'not one of sum, error' -- "$T/a.tns" -o "$T/x.blco" --duplicates keep
expect 2 'not a size' -- "$T/a.tns" -o "$T/x.blco" --mem-limit lots
expect 2 'power of two' -- "$T/a.tns" -o "$T/x.blco" --segment-nnz 1000
expect 2 'not one of auto, gpu, compact, zstd, raw' -- "$T/a.tns" -o "$T/x.blco" --codec lz4
expect 2 'between 1 and 22' -- "$T/a.tns" -o "$T/x.blco" --zstd-level 30
expect 2 'applies to --codec auto, compact or zstd only' -- "$T/a.tns" -o "$T/x.blco" \
    --codec gpu --zstd-level 3
for word in compact gpu zstd raw narrow delta; do
    grep -q -- "$word" "$T/help" && ok || bad "--help does not name --codec $word"
done
expect 2 'not one of f64, f32' -- "$T/a.tns" -o "$T/x.blco" --values f16
expect 2 'positive' -- "$T/a.tns" -o "$T/x.blco" --dims 10x0x5
expect 2 'unknown option' -- "$T/a.tns" -o "$T/x.blco" --bogus
expect 2 'unexpected argument' -- "$T/a.tns" "$T/b.tns" -o "$T/x.blco"
[ ! -e "$T/x.blco" ] && ok || bad "a usage error created the output"

# ---- the same output whatever the route ----
expect 0 'nonzeros' -- "$T/a.tns" -o "$T/b.blco"
same "$T/b.blco" "$T/ref.blco" "a second run"
grep -q 'duplicates summed' "$T/err" && grep -q 'bytes per nonzero' "$T/err" &&
    grep -q 'peak RSS' "$T/err" && grep -q 'parse' "$T/err" && ok || bad "summary: $(cat "$T/err")"
"$PACK" - -o "$T/stdin.blco" -q <"$T/a.tns" && same "$T/stdin.blco" "$T/ref.blco" "stdin" ||
    bad "stdin failed"
# a pipe of unknown size that ends within the first block claims what its text can hold,
# as a file of that size does, not the whole budget (issue 34: 17.0 GiB for a 1 MiB pipe)
cat "$T/a.tns" | "$PACK" - -o "$T/pipe1.blco" -m 8G --json -q >"$T/pipe.json" 2>"$T/err"
pb=$(json_field "$T/pipe.json" peak_budget)
[ -n "$pb" ] && [ "$pb" -lt $((2 * 1024 * 1024 * 1024)) ] && ok ||
    bad "a $(wc -c <"$T/a.tns")-byte pipe: peak budget $pb of an 8 GiB limit: $(cat "$T/err")"
same "$T/pipe1.blco" "$T/ref.blco" "pipe"
cat "$T/a.tns" | "$PACK" - -o "$T/pipe.blco" -q -m 7M --segment-nnz 1024 &&
    "$PACK" "$T/a.tns" -o "$T/pipe2.blco" -q --segment-nnz 1024 &&
    same "$T/pipe.blco" "$T/pipe2.blco" "a pipe, spilled" || bad "pipe failed"
expect 0 '' -- "$T/a.tns" -o "$T/t1.blco" -q --threads 1
same "$T/t1.blco" "$T/ref.blco" "--threads 1"
expect 0 '' -- "$T/a.tns" -o "$T/dims.blco" -q --dims 300x200x100
same "$T/dims.blco" "$T/ref.blco" "--dims equal to the learnt dims"
"$PACK" "$T/a.tns" -o "$T/s1.blco" -q --segment-nnz 1024 || bad "segment-nnz 1024"
for lim in 7M 9M 16M; do
    expect 0 '' -- "$T/a.tns" -o "$T/m$lim.blco" -q --segment-nnz 1024 --mem-limit $lim --json
    same "$T/m$lim.blco" "$T/s1.blco" "--mem-limit $lim"
done
runs=$(json_field "$T/out" runs)
expect 0 '' -- "$T/a.tns" -o "$T/m7d.blco" -q --segment-nnz 1024 -m 7M --dims 300x200x100 --json
same "$T/m7d.blco" "$T/s1.blco" "--mem-limit 7M --dims"
[ "$(json_field "$T/out" runs)" -gt 1 ] && ok ||
    bad "7M with --dims did not spill runs: $(cat "$T/out")"
expect 0 '' -- "$T/a.tns" -o "$T/m7a.blco" -q --segment-nnz 1024 -m 7M --base auto --json
same "$T/m7a.blco" "$T/s1.blco" "--mem-limit 7M --base auto"
[ "$(json_field "$T/out" raw_spill_bytes)" -gt 0 ] && ok ||
    bad "base auto did not spill coordinates"
expect 0 '' -- "$T/a.tns" -o "$T/f32.blco" -q --values f32 --codec zstd --zstd-level 5
[ -s "$T/f32.blco" ] && ok || bad "f32 zstd output"
for codec in raw narrow delta gpu compact; do
    expect 0 '' -- "$T/a.tns" -o "$T/c$codec.blco" -q --codec $codec
done
# f.tns: the same coordinates with random values in (0, 1] (duplicates summed)
"$PACK" "$T/f.tns" -o "$T/rnd.blco" -q && ok || bad "pack random values"
"$PACK" "$T/f.tns" -o "$T/rndc.blco" -q --codec compact && ok || bad "pack random values, compact"
[ "$(wc -c <"$T/craw.blco")" -gt "$(wc -c <"$T/cdelta.blco")" ] && ok ||
    bad "raw not larger than delta"

# an independent check of the format: every checksum, segment and coordinate
if [ -n "$INFO" ] && [ -x "$INFO" ]; then
    for f in ref m7M m7a f32 craw cgpu; do
        "$INFO" --verify "$T/$f.blco" >"$T/info" 2>&1 && grep -q 'verify *ok' "$T/info" && ok ||
            bad "blco-info --verify $f.blco: $(tail -2 "$T/info")"
    done
    # --codec gpu: every segment decodes on a GPU (no zstd); zstd files: none does
    "$INFO" "$T/cgpu.blco" >"$T/info" 2>&1
    n=$(sed -n 's/^segments *\([0-9]*\) .*/\1/p' "$T/info")
    grep -q "^gpu decode *$n of $n segments" "$T/info" && ok ||
        bad "--codec gpu: $(grep -e '^gpu decode' -e '^segments' -e '^codecs' "$T/info")"
    "$INFO" "$T/f32.blco" >"$T/info" 2>&1
    grep -q "^gpu decode *0 of " "$T/info" && ok ||
        bad "zstd: $(grep -e '^gpu decode' -e '^codecs' "$T/info")"
    # The default (auto): random values stay plain, every segment decodes on a GPU, while
    # --codec compact (the default until 2026-11-26) puts zstd on their byte planes; integer
    # counts take the integer codec (format 1.2), which a GPU decodes too, at a fraction of
    # the plain column's size.
    "$INFO" "$T/rnd.blco" >"$T/info" 2>&1
    n=$(sed -n 's/^segments *\([0-9]*\) .*/\1/p' "$T/info")
    grep -q "^gpu decode *$n of $n segments" "$T/info" &&
        grep -q "^codecs *index: delta $n; values: f64 $n " "$T/info" && ok ||
        bad "default, random values: $(grep -e '^gpu decode' -e '^codecs' "$T/info")"
    "$INFO" "$T/rndc.blco" >"$T/info" 2>&1
    grep -q "^gpu decode *0 of $n segments" "$T/info" &&
        grep -q "values: f64-planes+zstd $n " "$T/info" && ok ||
        bad "compact, random values: $(grep -e '^gpu decode' -e '^codecs' "$T/info")"
    "$INFO" "$T/ref.blco" >"$T/info" 2>&1
    grep -q "^gpu decode *$n of $n segments" "$T/info" &&
        grep -q "values: int $n " "$T/info" && grep -q "^format *\.blco 1\.2," "$T/info" && ok ||
        bad "default, integer values: $(grep -e '^gpu decode' -e '^codecs' -e '^format' "$T/info")"
    [ $(($(wc -c <"$T/ref.blco") * 3)) -le $(wc -c <"$T/craw.blco") ] &&
        [ "$(wc -c <"$T/ref.blco")" -le "$(wc -c <"$T/cgpu.blco")" ] && ok ||
        bad "default, integer values: $(wc -c <"$T/ref.blco") bytes, gpu $(wc -c <"$T/cgpu.blco"), raw $(wc -c <"$T/craw.blco")"
fi

# base 0 and auto on a 0-based file
sed 's/^\([0-9]*\) \([0-9]*\) \([0-9]*\) /\1 \2 0 /' "$T/a.tns" | head -1000 >"$T/zero.tns"
expect 1 'zero.tns:1: index 0 in mode 3' -- "$T/zero.tns" -o "$T/z.blco"
expect 0 '' -- "$T/zero.tns" -o "$T/z0.blco" -q --base 0
expect 0 '' -- "$T/zero.tns" -o "$T/za.blco" -q --base auto --json
same "$T/za.blco" "$T/z0.blco" "--base auto on a 0-based file"
grep -q '"base":0,"base_detected":true' "$T/out" && ok ||
    bad "base auto not detected: $(cat "$T/out")"

# ---- errors: file:line, paths, nothing written ----
{ head -n 12344 "$T/a.tns"; echo "1 2 3 oops"; tail -n +12345 "$T/a.tns"; } >"$T/bad.tns"
expect 1 "^blco-pack: $T/bad.tns:12345: value 'oops' is not a number" -- "$T/bad.tns" \
    -o "$T/bad.blco"
"$PACK" - -o "$T/bad.blco" <"$T/bad.tns" 2>"$T/err"
[ $? -eq 1 ] && grep -q "standard input:12345: value 'oops'" "$T/err" && ok ||
    bad "stdin line: $(cat "$T/err")"
expect 1 ':12345: .*not a number' -- "$T/bad.tns" -o "$T/bad.blco" -m 7M --segment-nnz 1024
[ ! -e "$T/bad.blco" ] && ok || bad "a malformed input left an output"
expect 1 "$T/missing.tns: cannot open" -- "$T/missing.tns" -o "$T/x.blco"
expect 1 'a.tns:[0-9]+: index 100 in mode 3 exceeds the declared dim 99' -- "$T/a.tns" \
    -o "$T/x.blco" \
    --dims 300x200x99
expect 1 'duplicate coordinate \(' -- "$T/a.tns" -o "$T/x.blco" --duplicates error
expect 1 'duplicate coordinate \(' -- "$T/a.tns" -o "$T/x.blco" --duplicates error -m 7M \
    --segment-nnz 1024
expect 1 'too small: packing needs at least' -- "$T/a.tns" -o "$T/x.blco" -m 8M
expect 1 'needs 130 index bits' -- "$DATA/tiny3.tns" -o "$T/x.blco" \
    --dims 9223372036854775808x9223372036854775808x16
expect 1 'tiny3.tns:2: expected 4 indices' -- "$DATA/tiny3.tns" -o "$T/x.blco" --dims 4x4x4x4
[ ! -e "$T/x.blco" ] && ok || bad "a failed pack left an output"

# a UTF-8 byte-order mark first: skipped, the same file as without it; a nonzero value
# that rounds to 0 is refused (it was stored as an explicit zero)
printf '\357\273\277' | cat - "$T/a.tns" >"$T/bom.tns"
expect 0 '' -- "$T/bom.tns" -o "$T/bom.blco" -q
same "$T/bom.blco" "$T/ref.blco" "a byte-order mark"
printf '1 1 1 1\n2 2 2 1e-400\n' >"$T/under.tns"
expect 1 "under.tns:2: value '1e-400' underflows to 0" -- "$T/under.tns" -o "$T/under.blco"

# an existing output: refused before any work and left as it was; --force replaces it
echo precious >"$T/keep.blco"
expect 1 'exists \(use --force' -- "$T/a.tns" -o "$T/keep.blco"
[ "$(cat "$T/keep.blco")" = precious ] && ok || bad "existing output changed"
expect 1 'exists' -- "$T/missing.tns" -o "$T/keep.blco"
expect 0 '' -- "$T/a.tns" -o "$T/keep.blco" --force -q
same "$T/keep.blco" "$T/ref.blco" "--force"
# an output that is the input (a link to it, a hard link): refused whatever --force says
cp "$T/a.tns" "$T/self.tns"
ln -s self.tns "$T/self-link.blco"
ln "$T/self.tns" "$T/self-hard.blco"
for o in self-link.blco self-hard.blco; do
    expect 1 "is the input file .*self.tns itself" -- "$T/self.tns" -o "$T/$o" --force -q
    cmp -s "$T/self.tns" "$T/a.tns" && ok || bad "blco-pack -o $o --force wrote over its input"
done
"$PACK" - -o "$T/self-hard.blco" --force -q <"$T/self.tns" 2>"$T/err"
[ $? -eq 1 ] && grep -q "is the file standard input reads" "$T/err" && ok ||
    bad "blco-pack - -o (the file on standard input): $(cat "$T/err")"
cmp -s "$T/self.tns" "$T/a.tns" && ok || bad "blco-pack - -o (its input) wrote over it"
rm -f "$T/self.tns" "$T/self-link.blco" "$T/self-hard.blco"
no_temps "$T" "errors"

# ---- signals: a pack waiting for input stops at once, nothing left behind ----
mkdir -p "$T/sig"
mkfifo "$T/fifo" || bad "mkfifo"
for sig in TERM INT; do
    "$PACK" "$T/fifo" -o "$T/sig/s.blco" -m 7M --segment-nnz 1024 --tmpdir "$T/sig" 2>"$T/sigerr" &
    pid=$!
    exec 3>"$T/fifo"
    head -n 100000 "$T/a.tns" >&3
    sleep 1
    kill -$sig $pid
    wait $pid
    st=$?
    exec 3>&-
    want=143
    [ $sig = INT ] && want=130
    [ $st -eq $want ] && ok || bad "SIG$sig: exit $st, expected $want: $(cat "$T/sigerr")"
    grep -q "stopped by SIG$sig" "$T/sigerr" && ok || bad "SIG$sig message: $(cat "$T/sigerr")"
    [ ! -e "$T/sig/s.blco" ] && ok || bad "SIG$sig left an output"
    no_temps "$T/sig" "SIG$sig"
done
# a FIFO that no writer opened yet: the signal ends the wait in open() (issue 33: "cannot
# open: Interrupted system call" and exit 1)
for sig in TERM INT; do
    "$PACK" "$T/fifo" -o "$T/sig/w.blco" -q 2>"$T/sigerr" &
    pid=$!
    wait_caught $pid
    sleep 0.2 # into open()
    kill -$sig $pid
    wait $pid
    st=$?
    want=143
    [ $sig = INT ] && want=130
    [ $st -eq $want ] && grep -q "stopped by SIG$sig; nothing was written" "$T/sigerr" && ok ||
        bad "SIG$sig waiting for a FIFO's writer: exit $st, expected $want: $(cat "$T/sigerr")"
done
# and during the sort and merge, with spilled runs: no temp or spill file survives
"$GEN" --dims 3000x2000x1000 --nnz 3M --seed 6 -o "$T/big.tns" -q
"$PACK" "$T/big.tns" -o "$T/sig/big.blco" -m 8M --segment-nnz 1024 --tmpdir "$T/sig" -q \
    2>"$T/sigerr" &
pid=$!
wait_caught $pid
sleep 0.5
kill -TERM $pid 2>/dev/null
wait $pid
st=$?
[ $st -eq 143 ] || [ $st -eq 0 ] && ok || bad "SIGTERM mid-pack: exit $st"
[ $st -eq 0 ] || [ ! -e "$T/sig/big.blco" ] && ok || bad "SIGTERM mid-pack left an output"
no_temps "$T/sig" "SIGTERM mid-pack"

# ---- a full disk and a read-only directory, in a private mount namespace ----
mkdir -p "$T/full" "$T/ro"
if unshare -rm true 2>/dev/null; then
    unshare -rm sh -c "mount -t tmpfs -o size=1m none '$T/full' &&
        mount -t tmpfs -o ro none '$T/ro' &&
        '$PACK' '$T/big.tns' -o '$T/full/o.blco' -q 2>'$T/e1';  echo \$? >'$T/r1';
        '$PACK' '$T/big.tns' -o '$T/o2.blco' -m 8M --segment-nnz 1024 --tmpdir '$T/full' -q \
            2>'$T/e2'; echo \$? >'$T/r2';
        '$PACK' '$T/a.tns' -o '$T/ro/o.blco' -q 2>'$T/e3'; echo \$? >'$T/r3';
        '$PACK' '$T/big.tns' -o '$T/o4.blco' -m 8M --segment-nnz 1024 --tmpdir '$T/ro' -q \
            2>'$T/e4'; echo \$? >'$T/r4';
        ls -a '$T/full' >'$T/l1'"
    [ "$(cat "$T/r1")" = 1 ] && grep -q "$T/full/o.blco: no space left" "$T/e1" && ok ||
        bad "full output disk: $(cat "$T/r1") $(cat "$T/e1")"
    [ "$(cat "$T/r2")" = 1 ] && grep -q "$T/full: no space left .*spill" "$T/e2" && ok ||
        bad "full spill disk: $(cat "$T/r2") $(cat "$T/e2")"
    [ "$(cat "$T/r3")" = 1 ] && grep -q "$T/ro: cannot write the output there: Read-only" "$T/e3" &&
        ok ||
        bad "read-only output directory: $(cat "$T/r3") $(cat "$T/e3")"
    [ "$(cat "$T/r4")" = 1 ] && grep -q "$T/ro: cannot create a spill file" "$T/e4" && ok ||
        bad "read-only spill directory: $(cat "$T/r4") $(cat "$T/e4")"
    grep -q 'tmp\|blco' "$T/l1" && bad "full disk: left $(cat "$T/l1")" || ok
    [ ! -e "$T/o2.blco" ] && [ ! -e "$T/o4.blco" ] && ok || bad "a failed spill left an output"
else
    echo "no private mount namespace: full-disk and read-only cases skipped"
fi

finish
