#!/bin/sh
# The fuzzing recipe of docs/development.md configures as written (issue 34: with g++ as
# the C++ compiler, linking failed on -fsanitize=fuzzer; with nvcc present, CUDA turned on
# and linking failed): its `meson setup` line succeeds where clang is installed, and
# -Dfuzz=true with another compiler stops at configure time saying what to do. Configures
# only (no build). Skips (77) without clang.
# usage: test_fuzz_recipe.sh MESON SOURCE_ROOT
meson=$1 src=$2
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
command -v clang >/dev/null 2>&1 && command -v clang++ >/dev/null 2>&1 ||
    { echo "SKIP: clang and clang++ are not installed"; exit 77; }

# The recipe's first command, up to `&&`, continuation lines joined.
setup=$(sed -n '/^## Fuzzing/,/^## /p' "$src/docs/development.md" |
    sed -n '/^```sh$/,/^```$/p' | sed '1d;$d' | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' |
    head -n 1 | sed 's/ *&&.*//')
case $setup in
"CC=clang CXX=clang++ meson setup build-fuzz "*-Dfuzz=true*-Dcuda=disabled*) ok ;;
*) bad "the recipe's setup line: '$setup'" ;;
esac
args=${setup#CC=clang CXX=clang++ meson setup build-fuzz }
# shellcheck disable=SC2086 # the recipe's options, split as the shell splits them
(cd "$src" && CC=clang CXX=clang++ "$meson" setup "$T/fuzz" $args) >"$T/out" 2>&1 && ok ||
    bad "the recipe does not configure: $(tail -n 5 "$T/out")"
grep -q "^build.ninja\|fuzz" "$T/fuzz/build.ninja" 2>/dev/null && grep -q 'fuzz_tns' "$T/fuzz/build.ninja" &&
    ok || bad "no fuzz_tns target in the configured build"

# another compiler: refused at configure time, with the recipe
if command -v gcc >/dev/null 2>&1; then
    (cd "$src" && CC=gcc CXX=g++ "$meson" setup "$T/gcc" -Dfuzz=true -Dcuda=disabled) \
        >"$T/out" 2>&1 && bad "-Dfuzz=true configured with gcc" || ok
    grep -q "needs clang.*CC=clang CXX=clang++ meson setup build-fuzz -Dfuzz=true -Dcuda=disabled" \
        "$T/out" && ok || bad "-Dfuzz=true with gcc: $(grep -i error "$T/out")"
fi
finish
