#!/bin/sh
# k3rs installer: curl -sfL https://get.k3rs.io | sh -
#            or: sh install.sh [server|agent] [k3rs flags...]
#
# Environment (k3s's variables, renamed):
#   K3RS_URL                     a server to join (https://...:6443); makes `agent` the default,
#                                with `server`: install another server of that cluster (HA)
#   K3RS_TOKEN / K3RS_TOKEN_FILE join token (required with K3RS_URL)
#   INSTALL_K3RS_EXEC            command and flags for the service (e.g. "server --disable-agent")
#   INSTALL_K3RS_VERSION         release to download (default: latest)
#   INSTALL_K3RS_SKIP_DOWNLOAD   true: use the k3rs already in the bin dir (or INSTALL_K3RS_BIN)
#   INSTALL_K3RS_BIN             a local k3rs binary to install instead of downloading
#   INSTALL_K3RS_BIN_DIR         where k3rs, kubectl and the scripts go (default /usr/local/bin)
#   INSTALL_K3RS_SYSTEMD_DIR     where the unit and its env file go (default /etc/systemd/system)
#   INSTALL_K3RS_SKIP_ENABLE     true: do not enable the unit
#   INSTALL_K3RS_SKIP_START      true: do not start (or restart) the unit
#   INSTALL_K3RS_FORCE_RESTART   true: restart even when nothing changed
#   INSTALL_K3RS_NAME            service name suffix: k3rs-<name> (default k3rs / k3rs-agent)
#   INSTALL_K3RS_SKIP_DEPS       true: do not install containerd, runc, CNI plugins, nftables
#   INSTALL_K3RS_DATA_DIR        data dir the uninstaller removes (default /var/lib/k3rs)
#   INSTALL_K3RS_CONFIG_DIR      config dir the uninstaller removes (default /etc/k3rs)
#
# Re-running with the same inputs changes nothing and does not restart the service.
set -eu

GITHUB_URL=${GITHUB_URL:-https://github.com/k3rs/k3rs/releases}
BIN_DIR=${INSTALL_K3RS_BIN_DIR:-/usr/local/bin}
SYSTEMD_DIR=${INSTALL_K3RS_SYSTEMD_DIR:-/etc/systemd/system}
DATA_DIR=${INSTALL_K3RS_DATA_DIR:-/var/lib/k3rs}
CONFIG_DIR=${INSTALL_K3RS_CONFIG_DIR:-/etc/k3rs}
SYSTEMD_RUNTIME_DIR=${INSTALL_K3RS_SYSTEMD_RUNTIME_DIR:-/run/systemd/system}

info() { echo "[INFO]  $*"; }
warn() { echo "[WARN]  $*" >&2; }
fatal() {
    echo "[ERROR] $*" >&2
    exit 1
}

is_true() {
    case "${1:-}" in
        true | TRUE | True | 1 | yes) return 0 ;;
        *) return 1 ;;
    esac
}

# --- what to install -------------------------------------------------------------
setup_command() {
    if [ -n "${K3RS_URL:-}" ]; then
        case "$K3RS_URL" in
            https://?*) ;;
            *) fatal "K3RS_URL must be an https:// URL of a k3rs server (got \"$K3RS_URL\")" ;;
        esac
        if [ -z "${K3RS_TOKEN:-}" ] && [ -z "${K3RS_TOKEN_FILE:-}" ]; then
            fatal "K3RS_URL is set, so K3RS_TOKEN or K3RS_TOKEN_FILE is required (the server's /var/lib/k3rs/server/node-token)"
        fi
        DEFAULT_COMMAND=agent
    else
        DEFAULT_COMMAND=server
    fi
    # First word of INSTALL_K3RS_EXEC or of the arguments decides server/agent.
    # Word splitting of INSTALL_K3RS_EXEC is intended (as in k3s's installer).
    # shellcheck disable=SC2086
    set -- ${INSTALL_K3RS_EXEC:-} "$@"
    case "${1:-}" in
        server | agent)
            COMMAND=$1
            shift
            ;;
        -* | "") COMMAND=$DEFAULT_COMMAND ;;
        *) fatal "unknown command \"$1\": expected server or agent" ;;
    esac
    EXEC_ARGS_FILE=$(mktemp)
    for arg in "$@"; do
        printf '%s\n' "$arg" >>"$EXEC_ARGS_FILE"
    done
    if [ "$COMMAND" = agent ] && [ -z "${K3RS_URL:-}" ]; then
        fatal "installing an agent needs K3RS_URL (https://<server>:6443) and K3RS_TOKEN"
    fi
    if [ -n "${INSTALL_K3RS_NAME:-}" ]; then
        SERVICE_NAME="k3rs-${INSTALL_K3RS_NAME}"
    elif [ "$COMMAND" = server ]; then
        SERVICE_NAME=k3rs
    else
        SERVICE_NAME=k3rs-agent
    fi
    case "$SERVICE_NAME" in
        *[!A-Za-z0-9_.-]*) fatal "INSTALL_K3RS_NAME may only contain letters, digits, '-', '_' and '.'" ;;
    esac
    UNIT_FILE="${SYSTEMD_DIR}/${SERVICE_NAME}.service"
    ENV_FILE="${SYSTEMD_DIR}/${SERVICE_NAME}.service.env"
    if [ "$COMMAND" = server ]; then
        UNINSTALL="${BIN_DIR}/k3rs-uninstall.sh"
    else
        UNINSTALL="${BIN_DIR}/k3rs-agent-uninstall.sh"
    fi
    KILLALL="${BIN_DIR}/k3rs-killall.sh"
}

# --- refusals ---------------------------------------------------------------------
verify_root() {
    if [ "$(id -u)" -ne 0 ]; then
        fatal "run the installer as root (sudo sh install.sh, or curl ... | sudo sh -)"
    fi
}

verify_systemd() {
    if is_true "${INSTALL_K3RS_SKIP_ENABLE:-}" && is_true "${INSTALL_K3RS_SKIP_START:-}"; then
        USE_SYSTEMCTL=false
        return
    fi
    if [ ! -d "$SYSTEMD_RUNTIME_DIR" ] || ! command -v systemctl >/dev/null 2>&1; then
        fatal "systemd is not running on this machine; k3rs installs as a systemd service. To only write the files, set INSTALL_K3RS_SKIP_ENABLE=true INSTALL_K3RS_SKIP_START=true"
    fi
    USE_SYSTEMCTL=true
}

setup_arch() {
    machine=$(uname -m)
    case "$machine" in
        x86_64 | amd64) ARCH=amd64 ;;
        aarch64 | arm64) ARCH=arm64 ;;
        armv7l | armv7 | armhf) ARCH=armhf ;;
        *) fatal "unsupported architecture \"$machine\": k3rs is built for x86_64, aarch64 and armv7" ;;
    esac
}

# --- the binary -------------------------------------------------------------------
CHANGED=false

# install_file <source> <target> <mode>: copies only when the content differs.
install_file() {
    if [ -f "$2" ] && cmp -s "$1" "$2"; then
        chmod "$3" "$2"
        return 0
    fi
    tmp="$2.k3rs-install.$$"
    cp "$1" "$tmp"
    chmod "$3" "$tmp"
    mv -f "$tmp" "$2"
    CHANGED=true
    info "wrote $2"
}

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

download() {
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL -o "$1" "$2"
    elif command -v wget >/dev/null 2>&1; then
        wget -qO "$1" "$2"
    else
        fatal "neither curl nor wget is installed; install one of them"
    fi
}

setup_binary() {
    mkdir -p "$BIN_DIR"
    if [ -n "${INSTALL_K3RS_BIN:-}" ]; then
        if [ ! -f "$INSTALL_K3RS_BIN" ] || [ ! -x "$INSTALL_K3RS_BIN" ]; then
            fatal "INSTALL_K3RS_BIN=$INSTALL_K3RS_BIN is not an executable file"
        fi
        install_file "$INSTALL_K3RS_BIN" "${BIN_DIR}/k3rs" 0755
        return
    fi
    if is_true "${INSTALL_K3RS_SKIP_DOWNLOAD:-}"; then
        [ -x "${BIN_DIR}/k3rs" ] ||
            fatal "INSTALL_K3RS_SKIP_DOWNLOAD is set but ${BIN_DIR}/k3rs does not exist; build it (cargo build --release) and set INSTALL_K3RS_BIN=target/release/k3rs"
        info "using the existing ${BIN_DIR}/k3rs"
        return
    fi
    version=${INSTALL_K3RS_VERSION:-latest}
    if [ "$version" = latest ]; then
        base="${GITHUB_URL}/latest/download"
    else
        base="${GITHUB_URL}/download/${version}"
    fi
    work=$(mktemp -d)
    info "downloading k3rs ${version} for ${ARCH}"
    download "${work}/sha256sum.txt" "${base}/sha256sum-${ARCH}.txt" ||
        fatal "cannot download ${base}/sha256sum-${ARCH}.txt"
    download "${work}/k3rs" "${base}/k3rs-${ARCH}" || fatal "cannot download ${base}/k3rs-${ARCH}"
    expected=$(grep " k3rs-${ARCH}\$" "${work}/sha256sum.txt" | cut -d' ' -f1)
    actual=$(sha256_of "${work}/k3rs")
    [ -n "$expected" ] || fatal "no checksum for k3rs-${ARCH} in sha256sum-${ARCH}.txt"
    [ "$expected" = "$actual" ] ||
        fatal "checksum mismatch for k3rs-${ARCH}: expected ${expected}, got ${actual}"
    chmod 0755 "${work}/k3rs"
    install_file "${work}/k3rs" "${BIN_DIR}/k3rs" 0755
    rm -rf "$work"
}

setup_kubectl() {
    if [ -e "${BIN_DIR}/kubectl" ] || [ -L "${BIN_DIR}/kubectl" ]; then
        return
    fi
    if command -v kubectl >/dev/null 2>&1; then
        info "kubectl found at $(command -v kubectl); not creating a symlink"
        return
    fi
    ln -s k3rs "${BIN_DIR}/kubectl"
    CHANGED=true
    info "created ${BIN_DIR}/kubectl -> k3rs (it runs the kubectl on PATH with /etc/k3rs/k3rs.yaml)"
}

# --- packages the agent needs -------------------------------------------------------
setup_dependencies() {
    if is_true "${INSTALL_K3RS_SKIP_DEPS:-}"; then
        return
    fi
    missing=""
    command -v containerd >/dev/null 2>&1 || missing="$missing containerd"
    command -v runc >/dev/null 2>&1 || missing="$missing runc"
    command -v nft >/dev/null 2>&1 || missing="$missing nftables"
    cni=false
    for d in /opt/cni/bin /usr/lib/cni /usr/libexec/cni; do
        [ -x "$d/bridge" ] && cni=true
    done
    [ "$cni" = true ] || missing="$missing cni-plugins"
    [ -n "$missing" ] || return 0
    if command -v apt-get >/dev/null 2>&1; then
        pkgs=$(echo "$missing" | sed 's/cni-plugins/containernetworking-plugins/')
        info "installing${pkgs} with apt-get"
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y $pkgs ||
            fatal "apt-get could not install${pkgs}; install them and re-run"
    elif command -v dnf >/dev/null 2>&1; then
        pkgs=$(echo "$missing" | sed 's/cni-plugins/containernetworking-plugins/')
        info "installing${pkgs} with dnf"
        # shellcheck disable=SC2086
        dnf install -y $pkgs || fatal "dnf could not install${pkgs}; install them and re-run"
    elif command -v apk >/dev/null 2>&1; then
        info "installing${missing} with apk"
        # shellcheck disable=SC2086
        apk add $missing || fatal "apk could not install${missing}; install them and re-run"
    else
        fatal "missing:${missing}. Install containerd, runc, the CNI plugins (bridge, host-local, loopback, portmap) and nftables with your package manager, or set INSTALL_K3RS_SKIP_DEPS=true"
    fi
}

# --- files ------------------------------------------------------------------------
write_env_file() {
    tmp=$(mktemp)
    umask_old=$(umask)
    umask 077
    {
        [ -n "${K3RS_URL:-}" ] && echo "K3RS_URL='${K3RS_URL}'"
        [ -n "${K3RS_TOKEN:-}" ] && echo "K3RS_TOKEN='${K3RS_TOKEN}'"
        [ -n "${K3RS_TOKEN_FILE:-}" ] && echo "K3RS_TOKEN_FILE='${K3RS_TOKEN_FILE}'"
        true
    } >"$tmp"
    umask "$umask_old"
    install_file "$tmp" "$ENV_FILE" 0600
    rm -f "$tmp"
}

write_unit() {
    tmp=$(mktemp)
    # The unit template is embedded in the binary (systemd/k3rs*.service).
    set --
    while IFS= read -r line; do
        set -- "$@" "$line"
    done <"$EXEC_ARGS_FILE"
    "${BIN_DIR}/k3rs" systemd-unit "$COMMAND" --bin-dir "$BIN_DIR" --name "$SERVICE_NAME" -- "$@" >"$tmp" ||
        fatal "${BIN_DIR}/k3rs cannot render its systemd unit; is it a k3rs binary for this machine?"
    install_file "$tmp" "$UNIT_FILE" 0644
    rm -f "$tmp"
}

write_killall() {
    tmp=$(mktemp)
    cat >"$tmp" <<EOF
#!/bin/sh
# Stops k3rs and everything it started: the services, container shims, pod mounts,
# the cni0/vxlan devices and the k3rs nftables tables. Containers' data stays on disk.
set -x
[ "\$(id -u)" -eq 0 ] || exec sudo "\$0" "\$@"

for service in ${SYSTEMD_DIR}/k3rs*.service; do
    [ -s "\$service" ] && systemctl stop "\$(basename "\$service")"
done

# containerd shims started for k3rs (their command line names the k3rs state dirs).
for pid in \$(pgrep -f 'containerd-shim' 2>/dev/null); do
    if tr '\\0' ' ' <"/proc/\$pid/cmdline" 2>/dev/null | grep -q -e '/run/k3rs' -e '${DATA_DIR}'; then
        kill -9 "\$pid" 2>/dev/null
    fi
done

do_unmount_and_remove() {
    # shellcheck disable=SC2016
    awk -v path="\$1" '\$2 ~ ("^" path) { print \$2 }' /proc/self/mounts | sort -r | xargs -r -t -n 1 sh -c 'umount "\$0" && rm -rf "\$0"'
}
do_unmount_and_remove '/run/k3rs'
do_unmount_and_remove '${DATA_DIR}'
do_unmount_and_remove '/var/lib/kubelet/pods'
do_unmount_and_remove '/run/netns/cni-'

ip link show 2>/dev/null | grep 'master cni0' | while read -r _ iface _; do
    iface=\${iface%%@*}
    [ -z "\$iface" ] || ip link delete "\$iface"
done
ip link delete cni0 2>/dev/null
ip link delete k3rs.vxlan 2>/dev/null
ip link delete k3rs-vxlan 2>/dev/null
for family in ip ip6 inet; do
    nft delete table "\$family" k3rs 2>/dev/null
done
rm -rf /var/lib/cni/
exit 0
EOF
    install_file "$tmp" "$KILLALL" 0755
    rm -f "$tmp"
}

write_uninstall() {
    tmp=$(mktemp)
    cat >"$tmp" <<EOF
#!/bin/sh
# Uninstalls ${SERVICE_NAME}: stops it, removes its unit and env file, and (when no other
# k3rs service remains) the binary, the kubectl symlink, the scripts and k3rs's data.
set -x
[ "\$(id -u)" -eq 0 ] || exec sudo "\$0" "\$@"

if [ -x '${KILLALL}' ]; then
    '${KILLALL}'
fi
if command -v systemctl >/dev/null 2>&1 && [ -d '${SYSTEMD_RUNTIME_DIR}' ]; then
    systemctl disable '${SERVICE_NAME}' 2>/dev/null
    systemctl reset-failed '${SERVICE_NAME}' 2>/dev/null
fi
rm -f '${UNIT_FILE}' '${ENV_FILE}'
if command -v systemctl >/dev/null 2>&1 && [ -d '${SYSTEMD_RUNTIME_DIR}' ]; then
    systemctl daemon-reload
fi

trap "rm -f '${UNINSTALL}'" EXIT
for unit in ${SYSTEMD_DIR}/k3rs*.service; do
    if [ -e "\$unit" ]; then
        echo "Another k3rs service remains (\$unit); keeping the binary and data."
        exit 0
    fi
done

if [ -L '${BIN_DIR}/kubectl' ] && [ "\$(readlink '${BIN_DIR}/kubectl')" = k3rs ]; then
    rm -f '${BIN_DIR}/kubectl'
fi
rm -f '${BIN_DIR}/k3rs' '${KILLALL}'
rm -rf '${DATA_DIR}' '${CONFIG_DIR}' /run/k3rs
exit 0
EOF
    install_file "$tmp" "$UNINSTALL" 0755
    rm -f "$tmp"
}

# --- systemd ------------------------------------------------------------------------
start_service() {
    if [ "$USE_SYSTEMCTL" != true ]; then
        info "INSTALL_K3RS_SKIP_ENABLE and INSTALL_K3RS_SKIP_START are set: not touching systemd"
        return
    fi
    if [ "$CHANGED" = true ]; then
        systemctl daemon-reload
    fi
    if ! is_true "${INSTALL_K3RS_SKIP_ENABLE:-}"; then
        systemctl enable "$SERVICE_NAME" >/dev/null 2>&1 || fatal "systemctl enable ${SERVICE_NAME} failed"
    fi
    if is_true "${INSTALL_K3RS_SKIP_START:-}"; then
        return
    fi
    if [ "$CHANGED" = false ] && ! is_true "${INSTALL_K3RS_FORCE_RESTART:-}" &&
        systemctl is-active --quiet "$SERVICE_NAME"; then
        info "No change detected so skipping service start"
        return
    fi
    info "starting ${SERVICE_NAME}"
    systemctl restart "$SERVICE_NAME" || fatal "${SERVICE_NAME} did not start; see journalctl -u ${SERVICE_NAME}"
}

main() {
    setup_command "$@"
    verify_root
    setup_arch
    verify_systemd
    setup_dependencies
    setup_binary
    setup_kubectl
    mkdir -p "$SYSTEMD_DIR"
    write_env_file
    write_unit
    write_killall
    write_uninstall
    rm -f "$EXEC_ARGS_FILE"
    if [ "$CHANGED" = false ]; then
        info "No change detected: ${SERVICE_NAME} is already installed like this"
    fi
    start_service
    info "done: ${SERVICE_NAME} (${COMMAND}); uninstall with ${UNINSTALL}"
}

main "$@"
