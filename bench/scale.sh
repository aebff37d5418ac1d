#!/usr/bin/env bash
# The scale bench (bench/scale.py: how seqkv's costs grow with the tokens
# it stores, at Llama-3, Qwen3, DeepSeek-V3 and stories260K shapes, through
# `seqkv serve`, beside dd and redis-server measured in the same run).
# Installs the Debian packages it uses when missing (scripts/deps.sh),
# builds build-release as scripts/demo.sh does (SEQKV_SCALE_NO_BUILD=1: use
# the binary there as it is), and runs the bench with Debian's python3.
# Arguments go to scale.py, e.g.:
#   bench/scale.sh --quick
#   bench/scale.sh --shapes llama3-8b,deepseek-v3 --sizes 1024,8192 --json s.json --png s.png
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/deps.sh
. scripts/deps.sh
seqkv_need_packages "${SEQKV_BUILD_PACKAGES[@]}" python3-matplotlib
if [ "${SEQKV_SCALE_NO_BUILD:-0}" != 1 ]; then
    if [ ! -f build-release/build.ninja ]; then
        meson setup build-release --buildtype=release -Dtests=false -Dcuda=auto >/dev/null
    fi
    meson compile -C build-release >/dev/null
fi
exec /usr/bin/python3 bench/scale.py --build build-release "$@"
