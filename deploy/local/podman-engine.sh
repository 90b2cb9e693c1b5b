#!/usr/bin/env bash
# A container engine for tests and for `make run-real`: Debian's Podman
# serving the Docker Engine API on a unix socket of the caller's own, and
# the offline test image (no public registry is reachable here).
#
#   podman-engine.sh install        install podman, runc and busybox-static (Debian/Ubuntu, as root)
#   podman-engine.sh image          build localhost/gpumarket-test:latest from busybox-static (idempotent)
#   podman-engine.sh up DIR         start `podman system service` on DIR/podman.sock (prints the socket)
#   podman-engine.sh down DIR       stop it
#
# Podman runs with `--runtime runc`: crun fails on this kind of machine
# (cgroups v1 in hybrid mode). Containers also need explicit nofile/nproc
# ulimits here, which the agent always sets.
set -euo pipefail

IMAGE=localhost/gpumarket-test:latest
PODMAN=(podman --runtime runc)

install() {
    local missing=()
    command -v podman >/dev/null || missing+=(podman)
    command -v runc >/dev/null || missing+=(runc)
    [ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1 && ldd /bin/busybox 2>&1 | grep -q "not a dynamic" || missing+=(busybox-static)
    command -v ssh >/dev/null || missing+=(openssh-client)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "podman-engine.sh: needs ${missing[*]}; run as root or install them" >&2
            exit 1
        fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            "${missing[@]}" uidmap >/dev/null
    fi
}

image() {
    if "${PODMAN[@]}" image exists "$IMAGE" 2>/dev/null; then
        echo "$IMAGE"
        return
    fi
    local root
    root=$(mktemp -d)
    mkdir -p "$root/bin" "$root/tmp" "$root/root" "$root/etc" "$root/workspace"
    cp /bin/busybox "$root/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
    echo "root:x:0:" >"$root/etc/group"
    tar -C "$root" -cf "$root.tar" .
    "${PODMAN[@]}" import \
        --change 'CMD ["/bin/sh", "-c", "while true; do sleep 3600; done"]' \
        --change 'ENV PATH=/bin' \
        "$root.tar" "$IMAGE" >/dev/null 2>&1 || { echo "podman-engine.sh: importing $IMAGE failed" >&2; exit 1; }
    rm -rf "$root" "$root.tar"
    echo "$IMAGE"
}

up() {
    local dir=$1
    mkdir -p "$dir"
    local sock="$dir/podman.sock"
    if [ -S "$sock" ] && curl -sf --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
        echo "$sock"
        return
    fi
    rm -f "$sock"
    nohup "${PODMAN[@]}" system service --time=0 "unix://$sock" >"$dir/podman.log" 2>&1 &
    echo $! >"$dir/podman.pid"
    for _ in $(seq 1 100); do
        if curl -sf --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
            echo "$sock"
            return
        fi
        sleep 0.1
    done
    echo "podman-engine.sh: the service on $sock did not answer; see $dir/podman.log" >&2
    exit 1
}

down() {
    local dir=$1
    if [ -f "$dir/podman.pid" ]; then
        kill "$(cat "$dir/podman.pid")" 2>/dev/null || true
        rm -f "$dir/podman.pid"
    fi
    rm -f "$dir/podman.sock"
}

case "${1:-}" in
install) install ;;
image) image ;;
up) up "${2:?usage: podman-engine.sh up DIR}" ;;
down) down "${2:?usage: podman-engine.sh down DIR}" ;;
*)
    sed -n '2,12p' "$0"
    exit 2
    ;;
esac
