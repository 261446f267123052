# Issue 18, items 2, 3, 4, 5 and 7: per-thread memory charged to the budget, --out and
# --checkpoint checked before any work, --resume removing what no state points at, --out
# folders that appear whole, and the messages for absurd dims and limits.
# Usage: test_tool_limits.sh BLCO-GEN BLCO-PACK BLCO-CPD BLCO-MTTKRP plain|sanitized
GEN=$1 PACK=$2 CPD=$3 MTTKRP=$4 BUILD=$5
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

"$GEN" --dims 300x200x100 --nnz 20000 --seed 4 -o "$T/s.blco" -q || exit 1

# ---- item 3: --out and --checkpoint that cannot be written are refused at once ----
: >"$T/file"
expect_run 1 "^blco-cpd: --out $T/file/out: .*Not a directory" err -- \
    "$CPD" "$T/s.blco" --rank 4 --iters 100000 --tol 0 --out "$T/file/out"
[ ! -s "$T/out" ] && ok || bad "--out refused after output: $(cat "$T/out")"
expect_run 1 "^blco-cpd: .*$T/file/ck.*Not a directory" err -- \
    "$CPD" "$T/s.blco" --rank 4 --iters 100000 --tol 0 --checkpoint "$T/file/ck"
[ ! -s "$T/out" ] && ok || bad "--checkpoint refused after output: $(cat "$T/out")"
expect_run 1 "^blco-mttkrp: --out $T/file/m: .*Not a directory" err -- \
    "$MTTKRP" "$T/s.blco" --rank 4 --out "$T/file/m" -q

# ---- item 4: --resume removes iteration folders that no state points at ----
"$CPD" "$T/s.blco" --rank 4 --iters 2 --tol 0 --checkpoint "$T/ck" -q || bad "checkpoint run"
mkdir "$T/ck/iter-000003.deadbeef"
: >"$T/ck/iter-000003.deadbeef/A1.npy"
: >"$T/ck/state.tmp"
expect_run 0 "" err -- "$CPD" "$T/s.blco" --rank 4 --iters 2 --tol 0 --checkpoint "$T/ck" --resume
left=$(cd "$T/ck" && ls | tr '\n' ' ')
case "$left" in
"iter-000002."????????" state ") ok ;;
*) bad "after --resume the checkpoint holds: $left" ;;
esac

# ---- item 5: a killed --out run leaves no DIR; the next run removes its temporary ----
"$GEN" --dims 3000x2000x1000 --nnz 300000 --seed 4 -o "$T/m.blco" -q || exit 1
"$CPD" "$T/m.blco" --rank 8 --iters 100000 --tol 0 -t 1 --out "$T/cp" -q &
pid=$!
i=0
until [ -n "$(ls -d "$T"/cp.tmp.$pid.* 2>/dev/null)" ] || [ $i -gt 200 ]; do
    sleep 0.05
    i=$((i + 1))
done
sleep 0.3
kill -9 $pid
wait $pid 2>/dev/null
[ ! -e "$T/cp" ] && ok || bad "a killed blco-cpd --out left $T/cp"
[ -n "$(ls -d "$T"/cp.tmp.$pid.* 2>/dev/null)" ] && ok || bad "no temporary folder was seen"
expect_run 0 "" err -- "$CPD" "$T/s.blco" --rank 4 --iters 2 --out "$T/cp" -q
[ -z "$(ls -d "$T"/cp.tmp.* 2>/dev/null)" ] && ok || bad "stale temporary folder kept"
[ "$(cd "$T/cp" && ls | tr '\n' ' ')" = "A1.npy A2.npy A3.npy lambda.npy summary.json " ] && ok ||
    bad "--out holds: $(ls "$T/cp")"
# Into an existing folder: our files are replaced, others kept.
: >"$T/cp/mine.txt"
expect_run 0 "" err -- "$MTTKRP" "$T/s.blco" --rank 4 --out "$T/cp" -q
[ "$(cd "$T/cp" && ls | tr '\n' ' ')" = "A1.npy A2.npy A3.npy M1.npy M2.npy M3.npy lambda.npy mine.txt summary.json " ] &&
    ok || bad "existing --out folder holds: $(ls "$T/cp")"

# ---- item 7: messages ----
printf '1 1 1 1.0\n18446744073709551615 2 3 2.0\n' >"$T/h.tns"
"$PACK" "$T/h.tns" -o "$T/h.blco" >/dev/null 2>&1 || bad "pack of a 2^64-1 dim"
expect_run 1 "^blco-cpd: $T/h.blco: dim 1 \(18446744073709551615\) is 0 or too large" err -- \
    "$CPD" "$T/h.blco" --rank 2 --iters 2
grep -q "iter" "$T/out" && bad "table header before the error: $(cat "$T/out")" || ok
phys=$(awk '/^MemTotal:/ { print $2 * 1024 }' /proc/meminfo)
for tool in "$CPD" "$MTTKRP"; do
    expect_run 0 "warning: --mem-limit 999 TiB is more than this machine's memory .*using a limit of" \
        err -- "$tool" "$T/s.blco" --rank 2 --iters 1 --mem-limit 999T -q
    # once, though the tool runs itself again to set OpenMP's waits (issue 34: twice)
    [ "$(grep -c 'more than this machine' "$T/err")" = 1 ] && ok ||
        bad "${tool##*/}: the --mem-limit warning $(grep -c 'more than this machine' "$T/err") times"
done
expect_run 0 "warning: --mem-limit 999 TiB is more than this machine's memory" err -- \
    "$PACK" "$T/h.tns" -o "$T/h2.blco" -m 999T
[ -n "$phys" ] && ok
# --mem-limit 0 means one thing everywhere (issue 33: refused by blco-pack, "3/4 of RAM" in
# blco-cpd and blco-mttkrp): refused, saying how to get the default
for tool in "$CPD" "$MTTKRP"; do
    expect_run 2 "--mem-limit must be above 0 \(leave it out for the default" err -- \
        "$tool" "$T/s.blco" --rank 2 --mem-limit 0
done
expect_run 2 "--mem-limit must be above 0 \(leave it out for the default" err -- \
    "$PACK" "$T/h.tns" -o "$T/h3.blco" --mem-limit 0

# ---- a long path (HPC project trees run deep): the reason after it is kept whole ----
deep="$T/$(printf 'p%.0s' $(seq 200))/$(printf 'q%.0s' $(seq 200))"
mkdir -p "$deep" && cp "$T/s.blco" "$deep/x.blco" || exit 1
expect_run 1 "the memory budget is too small to stream this file: .*raise --mem-limit$" err -- \
    "$CPD" "$deep/x.blco" --rank 4 --mem-limit 1K
expect_run 1 "the memory budget is too small to stream this file: .*raise --mem-limit$" err -- \
    "$MTTKRP" "$deep/x.blco" --rank 1 --mem-limit 16K -q
head -c 300 "$T/s.blco" >"$deep/cut.blco"
expect_run 1 "cut.blco: .*(truncated|short|corrupt|ends)" err -- "$MTTKRP" "$deep/cut.blco" -q
grep -q '\.\.\.$' "$T/err" && bad "a message cut: $(cat "$T/err")" || ok

# ---- item 2: thread stacks and buffers are charged: peak RSS within limit + 64 MiB ----
if [ "$BUILD" = sanitized ]; then
    echo "item 2 (peak RSS) skipped: sanitizers' shadow memory is not the program's"
elif [ ! -x /usr/bin/time ]; then
    echo "item 2 (peak RSS) skipped: GNU time (/usr/bin/time) not installed"
else
    rss_check() { # rss_check LIMIT_MIB COMMAND...
        lim=$1
        shift
        /usr/bin/time -f "%M" -o "$T/rss" "$@" >/dev/null 2>"$T/err" || {
            bad "$*: $(cat "$T/err")"
            return
        }
        kb=$(tail -1 "$T/rss")
        echo "peak RSS $((kb / 1024)) MiB: $*"
        [ "$kb" -le $(((lim + 64) * 1024)) ] && ok ||
            bad "$*: peak RSS $kb KiB over $((lim + 64)) MiB"
        grep -q "warning: 4096 threads do not fit the memory budget" "$T/err" && ok ||
            bad "$*: no warning about the threads: $(cat "$T/err")"
    }
    "$GEN" --dims 20000x15000x10000 --nnz 1M --seed 2 -o "$T/x.blco" -q || exit 1
    rss_check 100 "$CPD" "$T/x.blco" --rank 16 --iters 2 -t 4096 --mem-limit 100M -q
    rss_check 100 "$MTTKRP" "$T/x.blco" --rank 16 -t 4096 --mem-limit 100M -q
    "$GEN" --dims 20000x15000x10000 --nnz 2M --seed 2 -o "$T/p.tns" -q || exit 1
    rss_check 64 "$PACK" "$T/p.tns" -o "$T/p.blco" -m 64M -t 4096
fi
finish
