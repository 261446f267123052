#!/bin/sh
# Slow: blco-pack's peak RSS on a generated tensor at least ten times its --mem-limit must
# stay within the limit plus 64 MiB, measured by GNU time. Prints the measurement.
# Usage: test_pack_rss.sh path/to/blco-pack path/to/blco-gen [limit MiB] [text MB]
PACK=$1 GEN=$2 LIMIT_MB=${3:-64} TEXT_MB=${4:-700}
[ -x "$PACK" ] && [ -x "$GEN" ] ||
    { echo "usage: $0 blco-pack blco-gen [limit] [size]" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "GNU time (/usr/bin/time) not installed: skipped"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/blco-pack-rss.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

# About 36 bytes of text per nonzero at these dims.
nnz=$((TEXT_MB * 1000000 / 36))
"$GEN" --kind powerlaw --skew 2 --dims 2000000x1000000x50000 --nnz "$nnz" --seed 9 \
    -o "$T/big.tns" -q || exit 1
size=$(wc -c <"$T/big.tns")
limit=$((LIMIT_MB * 1048576))
[ "$size" -ge $((10 * limit)) ] || { echo "FAIL: input $size bytes is not 10x the limit"; exit 1; }

cpu=$(uname -m) model=$(sed -n 's/^model name[^:]*: *//p' /proc/cpuinfo | head -1)
echo "machine: $model, $(nproc) cores ($cpu), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "input: $size bytes of .tns text ($(awk "BEGIN{printf \"%.1f\", $size / $limit}")x the limit)"
echo "mem-limit: $LIMIT_MB MiB; allowed peak RSS: $((LIMIT_MB + 64)) MiB"
status=0
# dims unknown (coordinates spilled until they are known), then dims given (linearized
# while reading); both spill sorted runs and merge them
for dims in "" "--dims 2000000x1000000x50000"; do
    rm -f "$T/big.blco"
    /usr/bin/time -v "$PACK" "$T/big.tns" -o "$T/big.blco" --mem-limit "${LIMIT_MB}M" --json -q \
        $dims >"$T/json" 2>"$T/time" || { echo "FAIL: blco-pack failed:"; cat "$T/time"; exit 1; }
    rss_kb=$(sed -n 's/.*Maximum resident set size (kbytes): *\([0-9]*\).*/\1/p' "$T/time")
    wall=$(sed -n 's/.*Elapsed (wall clock) time.*: *\(.*\)/\1/p' "$T/time")
    echo "case: ${dims:-dims unknown}"
    echo "  peak RSS: $((rss_kb / 1024)) MiB ($rss_kb KiB); wall $wall"
    echo "  summary: $(cat "$T/json")"
    if [ "$rss_kb" -gt $(((LIMIT_MB + 64) * 1024)) ]; then
        echo "  FAIL: peak RSS $rss_kb KiB exceeds $((LIMIT_MB + 64)) MiB"
        status=1
    fi
done
[ $status -eq 0 ] && echo "ok"
exit $status
