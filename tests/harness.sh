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

# The closing line, and the exit status of the test.
finish() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
