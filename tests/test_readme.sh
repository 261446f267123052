#!/bin/sh
# README.md against what the code does, where a new user reads numbers and commands:
# the bootstrap commands it lists exist (and the ones bootstrap has are listed), the
# demo's nonzero count is what the demo's blco-gen command makes, the --full duration
# is the one perf/report --help gives, and the mem_limit row says how the budget is cut.
# usage: test_readme.sh SOURCE_ROOT BLCO-GEN
src=$1 gen=$2
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

# --full's duration, said twice.
r=$(grep -o 'full[^"]*about [0-9]* minutes' "$src/perf/report" | grep -o 'about [0-9]* minutes' | sort -u)
m=$(grep -o 'about [0-9]* minutes' "$readme" | sort -u)
[ -n "$r" ] && [ "$r" = "$m" ] && ok || bad "--full: perf/report says '$r', README '$m'"

# The budget inside --mem-limit: the limit less a reserve of 1/64 (at most 64 MiB).
grep '^| `mem_limit`' "$readme" | grep -q 'less a reserve of 1/64 of it, the reserve at most 64 MiB' &&
    ok || bad "the mem_limit row: $(grep '^| `mem_limit`' "$readme")"

# The CP-ALS and Tucker examples checkpoint into folders of their own (issue 34: both used
# ck/, and a checkpoint folder belongs to one tool).
tk=$(grep 'blco-tucker .*--checkpoint' "$readme" | sed 's/.*--checkpoint \([^ ]*\).*/\1/' | sort -u)
all=$(grep -- '--checkpoint [a-z]' "$readme" | sed 's/.*--checkpoint \([^ ]*\).*/\1/' | sort -u)
others=$(echo "$all" | grep -vxF "$tk")
[ -n "$tk" ] && [ -n "$others" ] && [ "$(echo "$all" | wc -l)" -eq 2 ] && ok ||
    bad "the README's checkpoint folders: Tucker '$tk', CP-ALS '$others'"
finish
