#!/bin/sh
# ./bootstrap test's closing line counts the logs this run wrote: `meson test --setup slow`
# writes testlog-slow.json, so `test --slow` must read that (issue 34: it read an earlier
# run's testlog.json, and crashed on a fresh clone that had none). bootstrap runs in a
# scratch clone with stand-ins for dpkg-query, meson and ninja on PATH: the stand-in meson
# writes a Meson JSON test log of known results.
# usage: test_bootstrap.sh SOURCE_ROOT
src=$1
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }

mkdir -p "$T/bin" "$T/clone"
cp "$src/bootstrap" "$T/clone/"
cat >"$T/bin/dpkg-query" <<'EOF'
#!/bin/sh
printf 'install ok installed'
EOF
cat >"$T/bin/ninja" <<'EOF'
#!/bin/sh
exit 0
EOF
# meson setup DIR ...: a configured DIR. meson test -C DIR [--setup slow] ...: two results
# (OK, SKIP), one more (OK) with the slow setup, in the log that Meson names.
cat >"$T/bin/meson" <<'EOF'
#!/bin/sh
case $1 in
setup) mkdir -p "$2" && : >"$2/build.ninja" ;;
test)
    dir=$3 log=testlog.json slow=
    for a in "$@"; do [ "$a" = slow ] && log=testlog-slow.json slow=1; done
    mkdir -p "$dir/meson-logs"
    { echo '{"name": "a", "result": "OK"}'; echo '{"name": "b", "result": "SKIP"}'
      [ -n "$slow" ] && echo '{"name": "c", "result": "OK"}'; } >"$dir/meson-logs/$log" ;;
esac
exit 0
EOF
chmod +x "$T/bin/"*
run() { (cd "$T/clone" && PATH="$T/bin:$PATH" JOBS=1 ./bootstrap "$@") >"$T/out" 2>&1 </dev/null; }

# a fresh clone: no log at all before the run
run test --slow
[ $? -eq 0 ] && ok || bad "bootstrap test --slow failed: $(cat "$T/out")"
# build and build-minimal: 2 OK + 1 SKIP each (slow); build-emu (gpu suite, no setup): 1 + 1
tail -n 1 "$T/out" | grep -qx 'tests: 5 passed, 0 failed, 3 skipped' && ok ||
    bad "bootstrap test --slow on a fresh clone: $(tail -n 3 "$T/out")"

# an earlier run's log of the default setup is not this run's
for d in build build-minimal; do
    for i in 1 2 3 4 5 6 7 8 9; do echo '{"name": "old", "result": "FAIL"}'; done \
        >"$T/clone/$d/meson-logs/testlog.json"
done
run test --slow
tail -n 1 "$T/out" | grep -qx 'tests: 5 passed, 0 failed, 3 skipped' && ok ||
    bad "bootstrap test --slow counted another run: $(tail -n 3 "$T/out")"
run test
tail -n 1 "$T/out" | grep -qx 'tests: 3 passed, 0 failed, 3 skipped' && ok ||
    bad "bootstrap test: $(tail -n 3 "$T/out")"
run summary --slow
grep -qx 'tests: 5 passed, 0 failed, 3 skipped' "$T/out" && ok ||
    bad "bootstrap summary --slow: $(cat "$T/out")"

# no logs: said, not a crash
rm -rf "$T/clone/build-minimal/meson-logs"
run summary
grep -q '^tests: 2 passed, 0 failed, 2 skipped; no results in build-minimal/meson-logs/testlog.json$' \
    "$T/out" && ok || bad "bootstrap summary without a log: $(cat "$T/out")"
finish
