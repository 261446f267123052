#!/bin/sh
# The installed library as another program sees it: `meson install` of this build into a
# scratch destdir; its files (shared library and soname, headers, tools, blco.pc); a C
# program built with nothing but `pkg-config --cflags --libs blco` and run against it; every
# installed header compiled alone as C and as C++; the library exporting the functions of
# the public headers and nothing else; README's example built and run the way it says; the
# Python package imported from the installed tree alone (when the build has it).
# usage: test_install.sh MESON BUILD-DIR PREFIX BINDIR LIBDIR INCLUDEDIR VERSION SANITIZE
#        CLIENT.c HEADER-DIR README TOOL...
set -u
meson=$1 build=$2 prefix=$3 bindir=$4 libdir=$5 includedir=$6 version=$7 sanitize=$8
client=$9
shift 9
headers=$1 readme=$2
shift 2
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

CC=${CC:-cc} CXX=${CXX:-c++}
for p in pkg-config "$CC" "$CXX" nm readelf; do
    command -v "$p" >/dev/null 2>&1 || { echo "SKIP: $p is not installed"; exit 77; }
done
# A library built with the sanitizers needs their runtimes loaded first: a program that
# uses it is built with the same -fsanitize (what any user of such a build must do).
san=
[ "$sanitize" != none ] && san="-fsanitize=$sanitize"

D=$T/root
case $libdir in /*) lib=$D$libdir ;; *) lib=$D$prefix/$libdir ;; esac
case $includedir in /*) inc=$D$includedir ;; *) inc=$D$prefix/$includedir ;; esac
case $bindir in /*) bin=$D$bindir ;; *) bin=$D$prefix/$bindir ;; esac

# ---- meson install into the destdir (no ldconfig there: a stand-in records a call) ----
mkdir -p "$T/bin"
printf '#!/bin/sh\necho "$*" >>"%s/ldconfig.calls"\n[ "$1" = -p ] && echo "	libblco.so.0.1 (libc6,x86-64) => %s/libblco.so.0.1"\nexit 0\n' \
    "$T" "${LDCONFIG_LISTS:-/usr/local/lib}" >"$T/bin/ldconfig"
chmod +x "$T/bin/ldconfig"
expect_run 0 '' any -- env PATH="$T/bin:$PATH" "$meson" install -C "$build" --no-rebuild --destdir "$D"
[ ! -e "$T/ldconfig.calls" ] && ok || bad "meson install --destdir ran ldconfig"
[ -d "$lib" ] || { bad "no $lib after meson install: $(cat "$T/out" "$T/err")"; finish; exit; }

# ---- a real install's last step refreshes the loader's cache (issue 34: the example failed
# with "cannot open shared object file" until ldconfig): src/install_ldconfig.sh, as meson
# runs it, with the stand-in ldconfig ----
script=$(dirname "$readme")/src/install_ldconfig.sh
if [ "$(id -u)" = 0 ]; then
    expect_run 0 '' any -- env PATH="$T/bin:$PATH" MESON_INSTALL_PREFIX=/usr/local sh "$script" lib
    grep -qx '' "$T/ldconfig.calls" && ok || bad "the install script did not run ldconfig"
    [ ! -s "$T/out" ] && ok || bad "ldconfig on a searched folder said: $(cat "$T/out")"
    expect_run 0 'is not a folder the dynamic linker searches.*LD_LIBRARY_PATH=/opt/x/lib' any -- \
        env PATH="$T/bin:$PATH" MESON_INSTALL_PREFIX=/opt/x sh "$script" lib
    rm -f "$T/ldconfig.calls"
fi
grep -q "add_install_script('src/install_ldconfig.sh'" "$(dirname "$readme")/meson.build" && ok ||
    bad "meson.build does not run src/install_ldconfig.sh at install"

# ---- what was installed ----
major=${version%%.*} rest=${version#*.}
soname=libblco.so.$major
[ "$major" = 0 ] && soname=libblco.so.0.${rest%%.*}
for f in libblco.so "$soname" "libblco.so.$version" pkgconfig/blco.pc; do
    [ -e "$lib/$f" ] && ok || bad "not installed: $lib/$f"
done
[ -L "$lib/libblco.so" ] && ok || bad "$lib/libblco.so is not a link to the versioned library"
got=$(readelf -d "$lib/libblco.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$got" = "$soname" ] && ok || bad "soname '$got', expected '$soname'"
internal=$(find "$D" -name 'libblco.a' -o -name 'test_*' -o -name 'bench_*')
[ -z "$internal" ] && ok || bad "internal files installed: $internal"
[ -f "$inc/blco.h" ] && ok || bad "not installed: $inc/blco.h"
for h in "$headers"/blco/*.h; do
    [ -f "$inc/blco/${h##*/}" ] && ok || bad "public header not installed: blco/${h##*/}"
done
for t in "$@"; do
    name=${t##*/}
    expect_run 0 "$name" any -- "$bin/$name" --help
done

# ---- pkg-config, and a program built with its flags only ----
export PKG_CONFIG_PATH="$lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D"
# Flags of system folders stay in, else a --prefix=/usr install would fall back on them.
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
expect_run 0 "^$version\$" any -- pkg-config --modversion blco
cflags=$(pkg-config --cflags blco) libs=$(pkg-config --libs blco)
case "$cflags $libs" in
*"$D"*-lblco*) ok ;;
*) bad "pkg-config --cflags --libs blco does not point into the destdir: $cflags $libs" ;;
esac
# shellcheck disable=SC2086 # word splitting of the flags is intended
expect_run 0 '' any -- "$CC" -std=c11 -Wall -Wextra -Werror $san -o "$T/client" "$client" \
    $cflags $libs
expect_run 0 '' any -- env LD_LIBRARY_PATH="$lib" ldd "$T/client"
grep -q "libblco.so.* => $lib/$soname" "$T/out" && ok ||
    bad "the program does not load the installed $soname: $(cat "$T/out")"
expect_run 0 "MTTKRP agrees in 3 modes" any -- env LD_LIBRARY_PATH="$lib" "$T/client" "$version"

# README's example, with README's command line.
sed -n '/^## Using the library from C/,/^## /p' "$readme" | sed -n '/^```c$/,/^```$/p' |
    sed '1d;$d' >"$T/example.c"
[ -s "$T/example.c" ] && ok || bad "no C example in README's 'Using the library from C'"
grep -q 'cc -std=c11 -o example example.c $(pkg-config --cflags --libs blco)' "$readme" && ok ||
    bad "README's build command for the example changed; change this test with it"
expect_run 0 '' any -- "$CC" -std=c11 -Wall -Wextra -Werror $san -o "$T/example" "$T/example.c" \
    $cflags $libs
expect_run 0 "^blco $version: 10000 nonzeros\$" any -- env LD_LIBRARY_PATH="$lib" "$T/example"

# ---- every public header alone, as C and as C++ ----
for h in "$inc/blco.h" "$inc"/blco/*.h; do
    name=${h#"$inc"/}
    printf '#include <%s>\n' "$name" >"$T/h.c"
    cp "$T/h.c" "$T/h.cpp"
    expect_run 0 '' any -- "$CC" -std=c11 -Wall -Wextra -Wpedantic -Wundef -Wstrict-prototypes \
        -Werror -fsyntax-only $cflags "$T/h.c"
    expect_run 0 '' any -- "$CXX" -std=c++11 -Wall -Wextra -Wpedantic -Wundef -Werror \
        -fsyntax-only $cflags "$T/h.cpp"
done

# ---- the ABI: the functions marked BLCO_API in the headers, nothing else ----
cat "$inc/blco.h" "$inc"/blco/*.h |
    awk '/^BLCO_API/ { if (match($0, /blco_[a-z0-9_]+\(/)) print substr($0, RSTART, RLENGTH-1) }' |
    sort -u >"$T/declared"
nm -D --defined-only "$lib/$soname" | awk '$2 ~ /^[A-Z]$/ && $2 != "A" { print $3 }' |
    sed 's/@.*//' | sort -u >"$T/exported"
[ "$(wc -l <"$T/declared")" -gt 100 ] && ok || bad "only $(wc -l <"$T/declared") declarations found"
extra=$(comm -13 "$T/declared" "$T/exported" | tr '\n' ' ')
[ -z "$extra" ] && ok || bad "exported but not public: $extra"
missing=$(comm -23 "$T/declared" "$T/exported" | tr '\n' ' ')
[ -z "$missing" ] && ok || bad "declared in a public header but not exported: $missing"

# ---- the Python package as meson installs it (BLCO_PYTHON: the build's interpreter) ----
if [ -n "${BLCO_PYTHON:-}" ]; then
    init=$(find "$D" -path '*/blco/__init__.py' | head -n 1)
    if [ -z "$init" ]; then
        bad "the build has Python but meson install put no blco/__init__.py under $D"
    else
        site=${init%/blco/__init__.py}
        # where the platform's python finds it (issue 34: lib/python3/dist-packages, which
        # Debian 12's python3 does not search), when its sys.path has a folder in the prefix
        "$BLCO_PYTHON" -c 'import os, sys
p = sys.argv[1]
print("\n".join(x for x in sys.path if x and os.path.relpath(x, p).startswith("lib/")))' \
            "$prefix" >"$T/searched"
        if [ -s "$T/searched" ]; then
            grep -qx "${site#"$D"}" "$T/searched" && ok ||
                bad "the package went to ${site#"$D"}, which $BLCO_PYTHON does not search: $(cat "$T/searched")"
        fi
        for f in __init__.pyi py.typed; do
            [ -f "$site/blco/$f" ] && ok || bad "not installed: $site/blco/$f"
        done
        ext=$(find "$site/blco" -name '_blco*.so')
        [ -n "$ext" ] && ok || bad "the extension blco._blco is not installed in $site/blco"
        # from the installed tree alone (PYTHONPATH=site; a script's own folder comes first on
        # sys.path, not the working one): a tensor written, opened, decomposed
        cat >"$T/use.py" <<'PY'
import os, sys
import numpy as np
import blco
assert blco.__file__.startswith(sys.argv[1]), blco.__file__
ind = np.array([[0, 0, 0], [1, 2, 3], [2, 1, 0], [0, 2, 2]])
blco.from_coo(ind, [1.0, 2.0, 3.0, 4.0], (3, 3, 4), sys.argv[2])
with blco.open(sys.argv[2]) as t:
    assert t.dims == (3, 3, 4) and t.nnz == 4
res = blco.cp_als(sys.argv[2], 2, n_iter_max=5, tol=0)
print(f"fit {res.fit:.4f} backend {res.backend}")
PY
        expect_run 0 '^fit 0\.[0-9]{4} backend (cpu|cuda|hybrid)$' any -- \
            env PYTHONPATH="$site" LD_LIBRARY_PATH="$lib" "$BLCO_PYTHON" "$T/use.py" "$site" \
            "$T/py.blco"
    fi
fi
finish
