#!/bin/sh
# README.md against what the code does, where a new user reads numbers and commands:
# the bootstrap commands it lists exist (and the ones bootstrap has are listed), the
# demo's nonzero count is what the demo's blco-gen command makes, the --full duration
# is the one perf/report --help gives, the mem_limit row says how the budget is cut, and
# the commands of "The first hour", run in order in a scratch folder that looks like a
# clone after `./bootstrap run` (build/ is this build), succeed and print the fits their
# comments say.
# With `tools` (the slow suite), then the commands of every section of "The tools", in
# order, but those that need data that is not here (amazon.tns.zst, delicious.tns.gz).
# usage: test_readme.sh SOURCE_ROOT BLCO-GEN BUILD_ROOT [tools]
src=$1 gen=$2 build=$3 what=${4:-first-hour}
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
readme="$src/README.md"

for c in "./bootstrap run" "./bootstrap test" "./bootstrap test --slow" "./bootstrap build"; do
    grep -qF -- "$c" "$readme" && ok || bad "README does not show '$c'"
done
grep -q '^build)' "$src/bootstrap" && grep -q -- '--slow' "$src/bootstrap" && ok ||
    bad "bootstrap lacks build or --slow"
grep -q 'tmux' "$src/bootstrap" && ok || bad "bootstrap does not install tmux (the terminal test)"

# The demo: the blco-gen line of `bootstrap run`, its output counted.
args=$(sed -n 's/^ *"\$bin\/blco-gen" \(--kind lowrank .*\) *\\$/\1/p' "$src/bootstrap")
[ -n "$args" ] && ok || bad "no demo blco-gen line in bootstrap"
n=$($gen $args -q -o - 2>/dev/null | grep -vc '^#')
said=$(grep -o '[0-9],[0-9][0-9][0-9],[0-9][0-9][0-9]' "$readme" | head -n 1 | tr -d ,)
[ -n "$n" ] && [ "$n" = "$said" ] && ok ||
    bad "README says the demo tensor has $said nonzeros; blco-gen $args makes $n"

# --full's duration, said twice (perf/report --help, docs/development.md).
r=$(grep -o 'full[^"]*about [0-9]* minutes' "$src/perf/report" | grep -o 'about [0-9]* minutes' | sort -u)
m=$(grep -o 'about [0-9]* minutes' "$src/docs/development.md" | sort -u)
[ -n "$r" ] && [ "$r" = "$m" ] && ok || bad "--full: perf/report says '$r', docs/development.md '$m'"

# The budget inside --mem-limit: the limit less a reserve of 1/64 (at most 64 MiB).
grep '^| `mem_limit`' "$src/docs/counters.md" |
    grep -q 'less a reserve of 1/64 of it, the reserve at most 64 MiB' &&
    ok || bad "the mem_limit row: $(grep '^| `mem_limit`' "$src/docs/counters.md")"

# The ranks test_mpi.sh runs, said the same way everywhere (issue 34: "2 and 3" here,
# "2, 3 and 4" there).
said=$(cat "$readme" "$src"/docs/*.md | tr '\n' ' ' | grep -o 'on [0-9][0-9, ]* and [0-9] ranks' | sort -u)
[ "$said" = "on 2, 3 and 4 ranks" ] && ok || bad "README and docs say the MPI tests run: $said"
grep -q '^mpi 4 ' "$src/tests/test_mpi.sh" && ok || bad "test_mpi.sh no longer runs 4 ranks"

# ---- the commands of a README section, run in order ----
# readme_block HEADING: the commands of the ```sh blocks under HEADING (up to the next
# heading), a line per command (continuation lines joined).
readme_block() {
    awk -v h="$1" '
        $0 == h { s = 1; next }
        s && /^#+ / && !b { exit }
        s && /^```sh$/ { b = 1; next }
        b && /^```$/ { b = 0; next }
        b && /^[ \t]*(#|$)/ { next }
        b { if (sub(/\\$/, "")) { line = line $0; next } print line $0; line = "" }
    ' "$readme"
}
# run_block HEADING: runs them in $T/clone, each with its output in $T/clone/.cmdN; a
# comment `fit F` after a command must match the fit it prints (to F's digits).
run_block() {
    readme_block "$1" >"$T/block"
    [ -s "$T/block" ] && ok || { bad "no commands under '$1' in README.md"; return; }
    while IFS= read -r cmd; do
        case $cmd in *amazon.tns.zst* | *delicious.tns.gz*)
            echo "not run (its data is not here): $cmd"
            continue ;;
        esac
        i=$((i + 1))
        out="$T/clone/.cmd$i"
        (cd "$T/clone" && PATH="$T/bin:$PATH" sh -c "$cmd") >"$out" 2>&1 </dev/null
        st=$?
        [ "$st" -eq 0 ] && ok || bad "'$cmd' exited $st: $(tail -n 5 "$out")"
        want=$(printf '%s\n' "$cmd" | sed -n 's/.*#.*fit \([0-9.]*[0-9]\).*/\1/p')
        if [ -n "$want" ]; then
            grep -q "fit $want" "$out" && ok ||
                bad "'$cmd': the README says fit $want; it printed: $(grep -i 'fit' "$out" | tail -n 2)"
        fi
    done <"$T/block"
}
mkdir -p "$T/clone" "$T/bin" && ln -s "$(cd "$build" && pwd)" "$T/clone/build"
# python3 as on Debian (numpy from python3-numpy), whatever python3 comes first on PATH here
/usr/bin/python3 -c 'import numpy' 2>/dev/null && ln -s /usr/bin/python3 "$T/bin/python3"
i=0
run_block "## The first hour"
# the job started in the background was followed to its end by blco-top
grep -q 'finished' "$T/clone/.cmd9" && ok || bad "blco-top did not see the job end: $(cat "$T/clone/.cmd9")"
for f in cp/A1.npy cp/lambda.npy cp/summary.json tk/U3.npy tk/core.npy run.jsonl; do
    [ -s "$T/clone/$f" ] && ok || bad "the first hour left no $f"
done
# the format version blco-info prints is one README explains (issue 34: it said v1.1 only)
v=$(sed -n 's/^format *\.blco \([0-9.]*\),.*/\1/p' "$T/clone/.cmd3")
[ "$v" = 1.0 ] && grep -q "1.1 for a file with" "$readme" &&
    grep -q "relabeled indices, 1.0 (which every reader of 1.1 reads)" "$readme" && ok ||
    bad "blco-info prints format '$v'; README: $(grep -n 'format version' "$readme")"
# the backend line is not the first line of standard error (issue 34): nothing says it is
grep -n "first line on standard error\|the first line says which" "$readme" "$src"/docs/*.md \
    "$src/tools/cli.h" && bad "a claim that the backend is the first line (above)" || ok
[ "$what" = tools ] || { finish; exit; }

# ---- the tools' sections, after the first hour, as a reader runs them ----
for h in "### blco-gen: make a test tensor" "### blco-pack: convert text to a .blco file, whatever its size" \
         "### blco-info and blco-cat: look inside a .blco file" "### blco-cpd: CP decomposition" \
         "### blco-tucker: Tucker decomposition" "### blco-mttkrp: compute MTTKRP" \
         "### blco-top: watch a running job"; do
    first=$((i + 1))
    run_block "$h"
    echo "ran $((i - first + 1)) commands of '$h'"
done
c=$T/clone
grep -q "warning: fit .* is near 0" "$c"/.cmd* && ok || bad "no warning on the random tensor's fit"
[ "$(sed -n 's/.*"fit":\([0-9.]*\).*/\1/p' "$c/cp/summary.json")" = \
  "$(sed -n 's/.*"fit":\([0-9.]*\).*/\1/p' "$c/cp-tns/summary.json")" ] && ok ||
    bad "blco-cpd on lr.tns and on lr.blco differ"
for f in x.blco pl.blco back.tns ttv/y2.npy out/M1.npy tk/core.npy vecs/v3.npy; do
    [ -s "$c/$f" ] && ok || bad "the tools' examples left no $f"
done
last=$(ls "$c"/.cmd* | sed 's/.*cmd//' | sort -n | tail -n 2 | head -n 1)
grep -q "finished ok" "$c/.cmd$last" && grep -q "^iteration  5 " "$c/.cmd$last" && ok ||
    bad "blco-top beside the new job: $(cat "$c/.cmd$last")"

# The CP-ALS and Tucker examples checkpoint into folders of their own (issue 34: both used
# ck/, and a checkpoint folder belongs to one tool).
tk=$(grep 'blco-tucker .*--checkpoint' "$readme" | sed 's/.*--checkpoint \([^ ]*\).*/\1/' | sort -u)
all=$(grep -- '--checkpoint [a-z]' "$readme" | sed 's/.*--checkpoint \([^ ]*\).*/\1/' | sort -u)
others=$(echo "$all" | grep -vxF "$tk")
[ -n "$tk" ] && [ -n "$others" ] && [ "$(echo "$all" | wc -l)" -eq 2 ] && ok ||
    bad "the README's checkpoint folders: Tucker '$tk', CP-ALS '$others'"
finish
