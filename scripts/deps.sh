# Sourced by the other scripts: install the Debian packages seqkv needs when
# any is missing (as root, or through sudo).
seqkv_need_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "seqkv: installing Debian packages: ${missing[*]}" >&2
    local SUDO=
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "seqkv: need root or sudo to install ${missing[*]}" >&2; exit 1; }
        SUDO=sudo
    fi
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# python3-redis and python3-numpy: the Python tests (redis-py as LMCache and
# SGLang backends use it; numpy pages and paged caches). libhiredis-dev: the
# remote tier's Redis Cluster client (remote/) speaks RESP through hiredis.
# libssl-dev: OpenSSL's ChaCha20-Poly1305 opens sealed raw records on GET.
# prometheus: a real scraper and promtool for the metrics endpoint's test.
# python3-venv: `pip install ./python` into a fresh venv; systemd:
# systemd-analyze verifies contrib/seqkv.service.
SEQKV_BUILD_PACKAGES=(gcc libc6-dev meson ninja-build pkg-config liblmdb-dev libsodium-dev libssl-dev libcriterion-dev libzstd-dev libxxhash-dev redis-tools redis-server
    libhiredis-dev python3-redis python3-numpy prometheus
    python3-venv systemd)
# What the demo needs beyond the build: gnuplot draws its chart (PNG).
SEQKV_DEMO_PACKAGES=(gnuplot-nox)
