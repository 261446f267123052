#!/bin/sh
# meson install's last step: refresh the dynamic linker's cache, so that a program built
# against the new libblco.so runs at once (without it: "libblco.so.0.1: cannot open shared
# object file" until someone runs ldconfig). Not run into a --destdir staging tree (meson
# skips it there). As root it runs ldconfig; otherwise, and when the library folder is not
# one the loader searches, it says what to do.
# usage (meson.add_install_script): install_ldconfig.sh LIBDIR
libdir=$1
case $libdir in /*) ;; *) libdir=${MESON_INSTALL_PREFIX:-/usr/local}/$libdir ;; esac
ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
if [ "$(id -u)" != 0 ]; then
    echo "blco: run ldconfig as root so that programs find $libdir/libblco.so"
    exit 0
fi
"$ldconfig" || { echo "blco: ldconfig failed; run it as root"; exit 0; }
"$ldconfig" -p 2>/dev/null | grep -q " => $libdir/libblco\.so" ||
    echo "blco: $libdir is not a folder the dynamic linker searches: add it to" \
        "/etc/ld.so.conf.d/ and run ldconfig, or set LD_LIBRARY_PATH=$libdir"
exit 0
