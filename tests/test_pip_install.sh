#!/bin/sh
# README's pip route, offline, with what ./bootstrap installs (issue 34: `pip install .`
# fetched meson-python from the network, and --no-build-isolation needed packages bootstrap
# did not install): the three commands of README's Python section, in a copy of the source
# (pip builds in the source folder), with --no-index so that nothing is fetched; then the
# installed package decomposes a tensor from another folder. Slow: pip builds the library.
# Skips (77) without python3-mesonpy, patchelf or python3-venv, which bootstrap installs.
# usage: test_pip_install.sh SOURCE_ROOT PYTHON
src=$1 python=${2:-/usr/bin/python3}
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
"$python" -c 'import mesonpy, venv, ensurepip' 2>/dev/null && command -v patchelf >/dev/null 2>&1 ||
    { echo "SKIP: needs python3-mesonpy, patchelf and python3-venv (./bootstrap installs them)"; exit 77; }
grep -q 'python3-mesonpy patchelf python3-venv' "$src/bootstrap" && ok ||
    bad "bootstrap does not install python3-mesonpy, patchelf and python3-venv"

# the commands, as README shows them
sed -n '/^## Python/,/^## /p' "$src/README.md" | sed -n '/^```sh$/,/^```$/p' |
    grep -E '^(python3 -m venv|venv/bin/)' | sed 's/ *#.*//' >"$T/cmds"
[ "$(wc -l <"$T/cmds")" = 3 ] && ok || bad "README's pip route is not three commands: $(cat "$T/cmds")"

mkdir "$T/src"
tar -C "$src" --exclude='./build*' --exclude=./.git --exclude=./demo -cf - . | tar -C "$T/src" -xf - ||
    { bad "cannot copy the source"; finish; exit; }
i=0
while IFS= read -r cmd; do
    i=$((i + 1))
    # python3 is the interpreter the build found; pip stays offline
    cmd=$(printf '%s' "$cmd" | sed "s|^python3 |$python |; s|pip install |pip install --no-index |")
    (cd "$T/src" && PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 sh -c "$cmd") \
        >"$T/out$i" 2>&1 </dev/null && ok || bad "'$cmd' failed: $(tail -n 15 "$T/out$i")"
done <"$T/cmds"
grep -qx '0\.[0-9.]*' "$T/out3" && ok || bad "the installed package's version: $(cat "$T/out3")"

cat >"$T/use.py" <<'PY'
import sys
import numpy as np
import blco
assert blco.__file__.startswith(sys.argv[1]), blco.__file__
ind = np.array([[0, 0, 0], [1, 2, 3], [2, 1, 0], [0, 2, 2]])
blco.from_coo(ind, [1.0, 2.0, 3.0, 4.0], (3, 3, 4), sys.argv[2])
res = blco.cp_als(sys.argv[2], 2, n_iter_max=5, tol=0)
print(f"fit {res.fit:.4f}")
PY
(cd "$T" && "$T/src/venv/bin/python" "$T/use.py" "$T/src/venv/" "$T/x.blco") >"$T/out" 2>&1 &&
    grep -q '^fit 0\.' "$T/out" && ok || bad "the pip-installed package: $(cat "$T/out")"
finish
