#!/bin/sh
# pkgconfig_test.sh BUILD PROG.c [FLAGS]: install the build BUILD into a
# temporary prefix, then build PROG.c out of tree with nothing but
# `pkg-config --cflags --libs chanos-net` (and FLAGS: the sanitizer flags
# the installed library was built with), and run it.
set -eu
build=$1
prog=$2
extra=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs chanos-net)
# shellcheck disable=SC2086 # the flags are words
${CC:-cc} -std=c11 -Wall -Wextra -Werror $extra -o "$tmp/prog" "$prog" $flags
"$tmp/prog"
