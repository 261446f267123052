# Output files of blco-gen, blco-pack and blco-cat (issue 18, items 1 and 6): kill -9 at
# any moment leaves no named file (O_TMPFILE), or, where O_TMPFILE is refused, a pid-named
# temporary that the next run writing the same output removes; outputs honour the umask.
# Usage: test_outputs.sh BLCO-GEN BLCO-PACK BLCO-CAT
GEN=$1 PACK=$2 CAT=$3
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

only() { # only DIR NAME...: DIR holds exactly these names
    dir=$1
    shift
    have=$(cd "$dir" && ls -A | sort | tr '\n' ' ')
    want=
    [ $# -gt 0 ] && want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
    [ "$have" = "$want" ] && ok || bad "$dir holds '$have', expected '$want'"
}

# wait_for PATTERN: up to 10 s for a file matching the glob to exist
wait_for() {
    i=0
    while [ $i -lt 200 ]; do
        for f in $1; do [ -e "$f" ] && return 0; done
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}

"$GEN" --dims 300x200x100 --nnz 20000 --seed 3 -o "$T/in.tns" -q || exit 1
"$PACK" "$T/in.tns" -o "$T/in.blco" >/dev/null 2>&1 || exit 1

# ---- umask (item 6) ----
for m in 027 002; do
    want=$(printf '%o' $((0666 & ~0$m)))
    d="$T/um$m"
    mkdir "$d"
    (
        umask $m
        "$GEN" --dims 50x40x30 --nnz 500 -o "$d/g.tns" >/dev/null 2>&1
        "$GEN" --dims 50x40x30 --nnz 500 -o "$d/g.blco" >/dev/null 2>&1
        "$PACK" "$T/in.tns" -o "$d/p.blco" >/dev/null 2>&1
        "$CAT" "$T/in.blco" -o "$d/c.tns" >/dev/null 2>&1
        BLCO_OUT_REFUSE_TMPFILE=1 "$CAT" "$T/in.blco" -o "$d/c2.tns" >/dev/null 2>&1
        BLCO_OUT_REFUSE_TMPFILE=1 "$PACK" "$T/in.tns" -o "$d/p2.blco" >/dev/null 2>&1
    )
    for f in g.tns g.blco p.blco c.tns c2.tns p2.blco; do
        got=$(stat -c %a "$d/$f" 2>/dev/null)
        [ "$got" = "$want" ] && ok || bad "umask $m: $f has mode '$got', expected $want"
    done
done

# ---- kill -9 (item 1) ----
# A text output large enough to be killed while being written.
big="--dims 100000x100000x100000 --nnz 30M --seed 1"
# kill_test NAME DIR COMMAND...: starts COMMAND, waits until it has its output open in DIR
# (an unnamed O_TMPFILE shows as DIR/#inode (deleted), a temporary as *.tmp.*), then kill -9.
kill_test() {
    name=$1 dir=$2
    shift 2
    "$@" >/dev/null 2>&1 &
    pid=$!
    i=0
    until ls -l /proc/$pid/fd 2>/dev/null | grep -Eq " -> $dir/(#[0-9]+ \(deleted\)|.*\.tmp\.)"; do
        i=$((i + 1))
        if [ $i -gt 5000 ] || ! kill -0 $pid 2>/dev/null; then
            bad "$name: its output was never seen open"
            break
        fi
    done
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
}
d="$T/k1"
mkdir "$d"
kill_test gen "$d" "$GEN" $big -o "$d/x.tns"
only "$d"
"$GEN" --dims 100000x100000x100000 --nnz 2M -o "$d/in.tns" -q || bad "gen in.tns"
kill_test pack "$d" "$PACK" "$d/in.tns" -o "$d/x.blco" -m 64M -t 1
only "$d" in.tns
rm -f "$d/in.tns"
"$GEN" --dims 2000x2000x2000 --nnz 3M -o "$d/c.blco" >/dev/null 2>&1 || bad "gen c.blco"
kill_test cat "$d" "$CAT" "$d/c.blco" -o "$d/c.tns"
only "$d" c.blco

# The fallback: a pid-named temporary is left, and the next run of the same output
# removes it; names of another shape or of a live process are kept.
d="$T/k2"
mkdir "$d"
BLCO_OUT_REFUSE_TMPFILE=1 "$GEN" $big -o "$d/x.tns" >/dev/null 2>&1 &
pid=$!
wait_for "$d/x.tns.tmp.$pid.*" || bad "no temporary x.tns.tmp.$pid.* appeared"
kill -9 $pid
wait $pid 2>/dev/null
left=$(cd "$d" && ls)
case "$left" in
x.tns.tmp.$pid.??????) ok ;;
*) bad "after kill -9 with the fallback: '$left'" ;;
esac
sleep 300 &
live=$!
: >"$d/x.tns.tmp.$live.abcdef"
: >"$d/x.tns.tmp.XYZ123"
: >"$d/x.tns.tmp.99999999.ab"
: >"$d/y.tns.tmp.$pid.abcdef"
BLCO_OUT_REFUSE_TMPFILE=1 "$GEN" --dims 50x40x30 --nnz 500 -o "$d/x.tns" >/dev/null 2>&1 ||
    bad "blco-gen after a killed run"
only "$d" x.tns "x.tns.tmp.$live.abcdef" x.tns.tmp.XYZ123 x.tns.tmp.99999999.ab \
    "y.tns.tmp.$pid.abcdef"
kill $live 2>/dev/null
wait $live 2>/dev/null
# The same cleanup from blco-pack and blco-cat, whose writes are not killed here.
: >"$d/p.blco.tmp.$pid.QWERTY"
: >"$d/c.tns.tmp.$pid.QWERTY"
"$PACK" "$T/in.tns" -o "$d/p.blco" >/dev/null 2>&1 || bad "blco-pack"
"$CAT" "$T/in.blco" -o "$d/c.tns" >/dev/null 2>&1 || bad "blco-cat"
[ ! -e "$d/p.blco.tmp.$pid.QWERTY" ] && [ ! -e "$d/c.tns.tmp.$pid.QWERTY" ] && ok ||
    bad "blco-pack or blco-cat kept a stale temporary"

finish
