#!/bin/sh
# Runs the whole k3rs test suite. Installs what the tests need when run as root on a
# Debian/Ubuntu machine (CI does this), then runs `cargo test`.
# Usage: sudo sh scripts/test.sh [extra cargo test args]
set -eu

cd "$(dirname "$0")/.."

need_pkgs=""
command -v mount >/dev/null 2>&1 || need_pkgs="$need_pkgs mount"
command -v python3 >/dev/null 2>&1 || need_pkgs="$need_pkgs python3"
# systemd-analyze checks the unit files; shellcheck the install scripts.
command -v systemd-analyze >/dev/null 2>&1 || need_pkgs="$need_pkgs systemd"
command -v shellcheck >/dev/null 2>&1 || need_pkgs="$need_pkgs shellcheck"
# protoc builds the CRI/containerd gRPC bindings; the agent's end-to-end tests run real
# containers and program nftables; test images are built from busybox-static.
command -v protoc >/dev/null 2>&1 || need_pkgs="$need_pkgs protobuf-compiler"
command -v containerd >/dev/null 2>&1 || need_pkgs="$need_pkgs containerd"
command -v runc >/dev/null 2>&1 || need_pkgs="$need_pkgs runc"
[ -x /usr/lib/cni/bridge ] || need_pkgs="$need_pkgs containernetworking-plugins"
command -v nft >/dev/null 2>&1 || need_pkgs="$need_pkgs nftables"
command -v iptables >/dev/null 2>&1 || need_pkgs="$need_pkgs iptables"
command -v conntrack >/dev/null 2>&1 || need_pkgs="$need_pkgs conntrack"
command -v ip >/dev/null 2>&1 || need_pkgs="$need_pkgs iproute2"
[ -x /bin/busybox ] || need_pkgs="$need_pkgs busybox-static"
if [ -n "$need_pkgs" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq || true
        # The package list is meant to split into words.
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need_pkgs
    else
        echo "missing packages:$need_pkgs (install them, or run this script as root on Debian/Ubuntu)" >&2
        exit 1
    fi
fi

if ! python3 -c "import kubernetes" 2>/dev/null; then
    python3 -m pip install -q kubernetes || {
        echo "the Python kubernetes client is missing: pip install kubernetes" >&2
        exit 1
    }
fi

# moto's S3 server, for the snapshot upload tests.
if ! command -v moto_server >/dev/null 2>&1; then
    python3 -m pip install -q 'moto[server]' || {
        echo "moto's S3 server is missing: pip install 'moto[server]'" >&2
        exit 1
    }
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "note: some tests mount a tmpfs and need root; run: sudo sh scripts/test.sh" >&2
fi

exec cargo test --locked "$@"
