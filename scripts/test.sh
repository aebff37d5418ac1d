#!/usr/bin/env bash
# The seqkv test suite: installs what is missing, builds in ./build, runs
# every Criterion suite, the fuzz corpora and the CLI checks (verbose, so
# each suite's Synthesis line shows). Cases that need ../shared/models
# skip with a message when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
seqkv_need_packages "${SEQKV_BUILD_PACKAGES[@]}"
if [ ! -f build/build.ninja ]; then
    meson setup build -Dcuda=auto
fi
meson compile -C build
meson test -C build -v --print-errorlogs --num-processes 2
