# Sourced by the shell tests: a scratch folder $T removed at exit, pass/fail counters,
# checks of a command's exit status and messages, and the closing "N passed, N failed".
T=$(mktemp -d "${TMPDIR:-/tmp}/blco-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# expect_run STATUS PATTERN WHERE -- COMMAND...: runs COMMAND with no input, then checks
# its exit status and that PATTERN (grep -E; empty for no check) is in WHERE: `err` for
# standard error only, `any` for standard output or error. The outputs stay in $T/out
# and $T/err for further checks.
expect_run() {
    want=$1 pat=$2 where=$3
    shift 4
    "$@" >"$T/out" 2>"$T/err" </dev/null
    got=$?
    files="$T/err"
    [ "$where" = any ] && files="$T/out $T/err"
    if [ "$got" -ne "$want" ]; then
        bad "$* exited $got, expected $want: $(cat "$T/err")"
    elif [ -n "$pat" ] && ! grep -Eq -e "$pat" $files; then
        bad "$*: no '$pat' in: $(cat $files)"
    else
        ok
    fi
}

# expect STATUS PATTERN -- COMMAND...: expect_run with PATTERN looked for in either output.
# A test that checks standard error only, or prefixes a tool, defines its own after sourcing.
expect() {
    want=$1 pat=$2
    shift 3
    expect_run "$want" "$pat" any -- "$@"
}

# part NAME: ends the part before (printing its seconds and checks) and starts one named
# so; `finish` ends the last. A long test's log then says where its time went, which is what
# a CI run that ran out of time leaves to go on. (Whole seconds, from date +%s.)
part_name='' part_t0=0 part_n0=0
part() {
    now=$(date +%s)
    [ -n "$part_name" ] &&
        echo "[part $part_name: $((now - part_t0)) s, $((pass + fail - part_n0)) checks]"
    part_name=${1:-} part_t0=$now part_n0=$((pass + fail))
}

# The closing line, and the exit status of the test.
finish() {
    part
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}

# wait_caught PID: waits (up to 30 s) until process PID catches SIGINT and SIGTERM. A job
# started with & in a script inherits SIGINT ignored and TERM's default action until the
# tool installs its handlers: a signal sent before then is lost or kills it silently, which
# a fixed sleep cannot rule out on a loaded machine. Without /proc: a fixed 1 s wait.
wait_caught() {
    [ -r "/proc/$1/status" ] || { sleep 1; return 0; }
    n=0
    while [ $n -lt 600 ]; do
        m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null)
        [ -n "$m" ] || return 0 # it has exited
        m=${m#"${m%????}"}      # signals 1 to 16: INT is 0x0002, TERM 0x4000
        [ $((0x$m & 0x4002)) -eq $((0x4002)) ] && return 0
        sleep 0.05
        n=$((n + 1))
    done
}
