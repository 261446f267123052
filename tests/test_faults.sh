# Fault injection over every tool that writes (issue 18): with tests/fault_shim.c preloaded,
# the n-th write/pwrite/fsync/rename/linkat/mkdir/fflush/fclose fails with ENOSPC (or
# EIO), for n over every such call of a successful run. Each run must either succeed
# with a complete, valid output, or exit 1 with a "tool: ..." message and leave no
# named file behind; the input is never touched. A failed checkpointed blco-cpd must
# leave a checkpoint that --resume continues to the uninterrupted run's result.
# Usage: test_faults.sh SHIM|none MODE(bounded|full) BLCO-GEN BLCO-PACK BLCO-CAT BLCO-MTTKRP
#        BLCO-CPD BLCO-INFO
SHIM=$1 MODE=$2 GEN=$3 PACK=$4 CAT=$5 MTTKRP=$6 CPD=$7 INFO=$8
if [ "$SHIM" = none ] || [ ! -f "$SHIM" ]; then
    echo "skipped: the fault shim is not built in sanitizer builds (ASan must load first)"
    exit 77
fi
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

"$GEN" --dims 60x50x40 --nnz 3000 --seed 5 -o "$T/in.tns" -q || exit 1
"$PACK" "$T/in.tns" -o "$T/in.blco" --segment-nnz 1024 >/dev/null 2>&1 ||
    "$PACK" "$T/in.tns" -o "$T/in.blco" >/dev/null 2>&1 || exit 1
chmod a-w "$T/in.tns" "$T/in.blco"
sums() { cksum "$T/in.tns" "$T/in.blco"; }
before=$(sums)

# The reference outputs, made without faults.
mkdir "$T/ref"
"$GEN" --dims 40x30x20 --nnz 2000 --seed 9 -o "$T/ref/g.tns" -q
"$GEN" --dims 40x30x20 --nnz 2000 --seed 9 -o "$T/ref/g.blco" -q
"$CAT" "$T/in.blco" -o "$T/ref/c.tns"
"$MTTKRP" "$T/in.blco" --rank 3 -t 1 --out "$T/ref/m" -q
"$CPD" "$T/in.blco" --rank 3 --iters 3 --tol 0 -t 1 --out "$T/ref/cp" -q
"$CPD" "$T/in.blco" --rank 3 --iters 3 --tol 0 -t 1 --checkpoint "$T/ref/ck" --out "$T/ref/ckout" -q

same_npys() { # same_npys DIR REF: the same .npy files, byte for byte
    for f in "$2"/*.npy; do cmp -s "$f" "$1/$(basename "$f")" || return 1; done
    [ "$(cd "$1" && ls ./*.npy | wc -l)" = "$(cd "$2" && ls ./*.npy | wc -l)" ]
}

# valid NAME OUT: the output of scenario NAME at OUT is complete
valid() {
    case $1 in
    pack) "$INFO" --verify "$2" >/dev/null 2>&1 && cmp -s "$2" "$T/in.blco" ;;
    gen-tns) cmp -s "$2" "$T/ref/g.tns" ;;
    gen-blco) cmp -s "$2" "$T/ref/g.blco" ;;
    cat) cmp -s "$2" "$T/ref/c.tns" ;;
    mttkrp) [ "$(ls "$2")" = "$(ls "$T/ref/m")" ] && same_npys "$2" "$T/ref/m" ;;
    cpd) same_npys "$2" "$T/ref/cp" && grep -q '"fit_history"' "$2/summary.json" ;;
    esac
}

# run_one NAME N: the scenario with the N-th call failing; prints the exit status
run_one() {
    name=$1 n=$2
    o="$T/o"
    rm -rf "$o"
    mkdir "$o"
    case $name in
    pack) set -- "$PACK" "$T/in.tns" -o "$o/x.blco" --segment-nnz 1024 ;;
    gen-tns) set -- "$GEN" --dims 40x30x20 --nnz 2000 --seed 9 -o "$o/x.tns" -q ;;
    gen-blco) set -- "$GEN" --dims 40x30x20 --nnz 2000 --seed 9 -o "$o/x.blco" -q ;;
    cat) set -- "$CAT" "$T/in.blco" -o "$o/x.tns" ;;
    mttkrp) set -- "$MTTKRP" "$T/in.blco" --rank 3 -t 1 --out "$o/x" -q ;;
    cpd) set -- "$CPD" "$T/in.blco" --rank 3 --iters 3 --tol 0 -t 1 --out "$o/x" -q ;;
    ckpt) set -- "$CPD" "$T/in.blco" --rank 3 --iters 3 --tol 0 -t 1 --checkpoint "$o/ck" -q ;;
    esac
    case $name in
    pack | gen-blco) out="$o/x.blco" ;;
    gen-tns | cat) out="$o/x.tns" ;;
    *) out="$o/x" ;;
    esac
    env LD_PRELOAD="$SHIM" BLCO_FAULT_AT="$n" BLCO_FAULT_ERRNO="$ERRNO" \
        BLCO_FAULT_COUNT_FILE="$T/count" "$@" >"$T/out" 2>"$T/err" </dev/null
    st=$?
    what="$name, call $n failing with $ERRNO"
    if [ "$name" = ckpt ]; then
        # Whatever happened, the folder holds a checkpoint that --resume completes, or
        # nothing (the first checkpoint failed), and no half-written iteration folder.
        if [ $st -ne 0 ] && { [ $st -ne 1 ] || ! grep -q '^blco-cpd: ' "$T/err"; }; then
            bad "$what: exit $st, stderr: $(cat "$T/err")"
            return
        fi
        if [ -e "$o/ck/state" ]; then
            [ "$(cd "$o/ck" && ls | grep -c '^iter-')" = 1 ] ||
                bad "$what: $(cd "$o/ck" && ls | tr '\n' ' ')"
            "$CPD" "$T/in.blco" --rank 3 --iters 3 --tol 0 -t 1 --checkpoint "$o/ck" --resume \
                --out "$o/r" -q >/dev/null 2>&1 && same_npys "$o/r" "$T/ref/ckout" ||
                bad "$what: --resume did not give the uninterrupted result"
            [ "$(cd "$o/ck" && ls | grep -vc '^iter-\|^state$')" = 0 ] ||
                bad "$what: after --resume: $(cd "$o/ck" && ls | tr '\n' ' ')"
        else
            [ -z "$(ls -A "$o/ck" 2>/dev/null | grep -v '^state\.tmp$')" ] &&
                [ ! -e "$o/ck/state.tmp" ] || bad "$what: no state, but: $(ls -A "$o/ck")"
        fi
        ok
        return
    fi
    left=$(ls -A "$o")
    if [ $st -eq 0 ]; then
        # A fault that the tool may ignore (an fsync of a folder): the output is complete.
        [ "$left" = "$(basename "$out")" ] && valid "$name" "$out" && ok ||
            bad "$what: exit 0 but the output is not complete: '$left'"
    elif [ $st -eq 1 ]; then
        tool=$(basename "$1")
        grep -q "^$tool: ." "$T/err" || bad "$what: exit 1 without a message: $(cat "$T/err")"
        [ -z "$left" ] && ok || bad "$what: left '$left'; stderr: $(cat "$T/err")"
    else
        bad "$what: exit $st: $(cat "$T/err")"
    fi
}

for name in pack gen-tns gen-blco cat mttkrp cpd ckpt; do
    ERRNO=ENOSPC
    run_one "$name" 0 >/dev/null
    total=$(cat "$T/count" 2>/dev/null)
    [ "${total:-0}" -gt 0 ] || { bad "$name: no counted call without faults"; continue; }
    # bounded: every n up to 24, then about 12 more spread over the rest; full: every n
    n=1
    while [ $n -le "$total" ]; do
        ERRNO=ENOSPC
        [ $((n % 3)) -eq 0 ] && ERRNO=EIO
        run_one "$name" $n
        if [ "$MODE" = full ] || [ $n -lt 24 ] || [ $n -eq "$total" ]; then
            n=$((n + 1))
        else
            n=$((n + (total - 24) / 12 + 1))
            [ $n -gt "$total" ] && n=$total
        fi
    done
    echo "$name: $total counted calls" >&2
done
[ "$(sums)" = "$before" ] && ok || bad "the inputs changed"
finish
