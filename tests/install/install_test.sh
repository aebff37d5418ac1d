#!/usr/bin/env bash
# `meson install` into a temporary root, then a program built against the
# installed files alone (seqkv.pc, seqkv.h, seqkv_client.h, libseqkv) runs;
# the library exports seqkv_* and nothing else; the binary is installed.
# usage: install_test.sh BUILD_DIR SOURCE_ROOT
set -euo pipefail
build=$1 src=$2
root=$(mktemp -d "${TMPDIR:-/tmp}/seqkv-install.XXXXXX")
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --destdir "$root/dest" --no-rebuild --quiet >/dev/null
pc=$(find "$root/dest" -name seqkv.pc)
[ -n "$pc" ] || { echo "install: no seqkv.pc installed"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
pkg() { pkg-config --define-variable=prefix="$root/dest$prefix" "$@" seqkv; }
echo "install: seqkv.pc says version $(pkg --modversion), $(pkg --libs)"
for h in seqkv.h seqkv_client.h; do
    [ -f "$root/dest$prefix/include/$h" ] || { echo "install: $h not installed"; exit 1; }
done
n=$(find "$root/dest$prefix/include" -type f | wc -l)
[ "$n" -eq 2 ] || { echo "install: $n headers installed, not 2"; exit 1; }
[ -x "$root/dest$prefix/bin/seqkv" ] || { echo "install: the seqkv binary is not installed"; exit 1; }
lib=$(find "$root/dest" -name 'libseqkv.so.*.*.*' | head -1)
internal=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^seqkv_' || true)
[ -z "$internal" ] || { echo "install: libseqkv exports more than seqkv_*:"; echo "$internal" | head; exit 1; }
# strict C99 with every warning an error: the headers stand alone (a
# sanitizer build's library wants its runtime in the program too)
san=()
if readelf -d "$lib" | grep -q 'libasan'; then
    san=(-fsanitize=address,undefined)
fi
cc -std=c99 -pedantic -Wall -Wextra -Werror "${san[@]}" $(pkg --cflags) \
    "$src/tests/install/use_seqkv.c" -o "$root/use_seqkv" $(pkg --libs)
mkdir "$root/store"
LD_LIBRARY_PATH=$(pkg --variable=libdir) "$root/use_seqkv" "$root/store"
