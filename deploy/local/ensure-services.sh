#!/usr/bin/env bash
# Makes sure what `make run` and `make test` need is up: PostgreSQL on
# 127.0.0.1:5432 (trust auth for local connections), RabbitMQ on 5672 with the
# management plugin (tests create a vhost each), libpq for diesel, and the
# browser tests' Chromium, Node.js and npm, and the webhook tests' Python
# receiver (standardwebhooks).
# Starts local servers from installed packages; on Debian/Ubuntu installs
# missing packages first; elsewhere says what to install.
set -euo pipefail

PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}

say() { printf 'ensure-services: %s\n' "$*"; }
have() { command -v "$1" >/dev/null 2>&1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=0
apt_install() {
  if ! have apt-get; then
    say "missing: $*. Install PostgreSQL 15+, RabbitMQ 3.10+ and libpq (headers) with your system's package manager, then run this again."
    exit 1
  fi
  if [ "$apt_updated" -eq 0 ]; then sudo_if_needed apt-get update -qq; apt_updated=1; fi
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

wait_for() { # what, seconds, command...
  local what=$1 secs=$2; shift 2
  for _ in $(seq 1 "$((secs * 2))"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  say "$what did not come up within ${secs}s"; return 1
}

# --- libpq (diesel links it) ---
if ! { [ -f /usr/include/postgresql/libpq-fe.h ] || pkg-config --exists libpq 2>/dev/null; }; then
  say "installing libpq-dev"
  apt_install libpq-dev pkg-config
fi

# --- PostgreSQL ---
if ! port_open "$PGPORT"; then
  if ! have pg_ctlcluster && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    say "installing postgresql"
    apt_install postgresql
    # Local development and tests connect without a password.
    for hba in /etc/postgresql/*/main/pg_hba.conf; do
      sudo_if_needed sed -i -E 's/^(host\s+all\s+all\s+127\.0\.0\.1\/32\s+)\S+/\1trust/; s/^(local\s+all\s+all\s+)\S+/\1trust/' "$hba"
    done
  fi
  say "starting postgresql"
  version=$(ls /etc/postgresql | sort -V | tail -n1)
  sudo_if_needed pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_for postgresql 30 port_open "$PGPORT"
fi
have psql && wait_for "postgresql (accepting queries)" 30 psql -h "$PGHOST" -p "$PGPORT" -U postgres -d postgres -Atc 'SELECT 1'

# --- RabbitMQ ---
if ! port_open 5672; then
  if ! have rabbitmq-server; then
    say "installing rabbitmq-server"
    apt_install rabbitmq-server
  fi
  say "starting rabbitmq"
  # Each quorum queue holds a few file handles; the default limit of 1024
  # ran out at a few hundred machines (issue 15). Raise it for the node.
  sudo_if_needed sh -c 'ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec rabbitmq-server -detached' || true
  wait_for rabbitmq 60 port_open 5672
fi
if ! port_open 15672; then
  say "enabling rabbitmq_management (tests create a vhost each through it)"
  sudo_if_needed rabbitmq-plugins enable rabbitmq_management >/dev/null
  wait_for "rabbitmq management" 60 port_open 15672
fi
have curl && wait_for "rabbitmq management API" 30 curl -sf -u guest:guest http://127.0.0.1:15672/api/overview
say "postgresql and rabbitmq are up"

# --- pgbench: the createOrder benchmark's baseline (benches/orders.rs) ---
# The bench runs the pgbench of the server's major version. Which Debian
# package ships it has moved between releases (the server package
# postgresql-<major>, the client package postgresql-client-<major>, once
# postgresql-contrib), so the candidates are tried in turn, smallest first,
# until /usr/lib/postgresql/<major>/bin/pgbench exists.
pg_major=""
if have psql; then
  pg_major=$(psql -h "$PGHOST" -p "$PGPORT" -U postgres -d postgres -Atc 'SHOW server_version_num' 2>/dev/null | awk '{ print int($1 / 10000) }' || true)
fi
if [ -n "$pg_major" ] && [ "$pg_major" -gt 0 ]; then
  pgbench_bin=/usr/lib/postgresql/$pg_major/bin/pgbench
  if [ ! -x "$pgbench_bin" ] && have apt-get; then
    for pkg in "postgresql-client-$pg_major" "postgresql-$pg_major" "postgresql-contrib-$pg_major" postgresql-contrib; do
      say "installing $pkg (for pgbench $pg_major, the createOrder bench's baseline)"
      apt_install "$pkg" 2>/dev/null || true
      [ -x "$pgbench_bin" ] && break
    done
  fi
  if [ ! -x "$pgbench_bin" ] && ! have pgbench; then
    say "missing pgbench for PostgreSQL $pg_major: make bench and make bench-smoke need it (install the PostgreSQL $pg_major package that ships pgbench)"
  fi
elif ! have pgbench; then
  say "missing pgbench: make bench and make bench-smoke need it (it comes with PostgreSQL)"
fi

# --- The browser tests' tools: Chromium, Node.js and npm (make web, make web-test,
# and the GraphQL-over-HTTP audit in tests/graphql-http) ---
# `make test` ends with the web front end's build and its browser tests in
# Debian's Chromium (test tools cannot download a browser here), so the
# README's two commands install them like the servers above. Without apt-get
# this only says what is missing: `make run` does not need them.
browser_missing=()
have chromium || browser_missing+=(chromium)
have node || browser_missing+=(nodejs)
if [ "${#browser_missing[@]}" -gt 0 ]; then
  if have apt-get; then
    say "installing ${browser_missing[*]} (the web build and browser tests)"
    apt_install "${browser_missing[@]}"
  else
    say "missing ${browser_missing[*]}: make web-test needs Chromium and Node.js 20+ with npm"
  fi
fi
# Debian's nodejs package may come without npm (NodeSource's includes it).
if have node && ! have npm; then
  if have apt-get; then
    say "installing npm"
    apt_install npm
  else
    say "missing npm: make web needs it"
  fi
fi
if have node; then
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$node_major" -lt 20 ]; then
    say "Node.js $(node --version) is older than web/package.json's >=20: make web may fail (install Node.js 20+, e.g. Debian 13's nodejs)"
  fi
fi

# --- The webhook tests' receiver: Python with the Standard Webhooks reference
# library (tests/webhooks/receiver.py verifies every delivery with it, not with
# our own code). A virtualenv outside the clone, like the cargo target dir.
WEBHOOK_PY=${GPUMARKET_TEST_PYTHON_VENV:-/var/tmp/gpumarket-py}
if ! "$WEBHOOK_PY/bin/python" -c 'import standardwebhooks' >/dev/null 2>&1; then
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1 && have apt-get; then
    say "installing python3-venv (the webhook tests' receiver)"
    apt_install python3-venv
  fi
  say "installing Python's standardwebhooks into $WEBHOOK_PY (the webhook tests' receiver)"
  python3 -m venv "$WEBHOOK_PY" && "$WEBHOOK_PY/bin/pip" install -q 'standardwebhooks==1.*' \
    || say "could not install standardwebhooks: the webhook system tests will fail"
fi

# --- The container engine (issue 16): rentals run as real containers ---
# The real-container tests and `make run-real` drive Debian's Podman through
# its Docker-compatible API (each starts a private `podman system service`,
# deploy/local/podman-engine.sh), with runc (crun fails on cgroups v1 hosts),
# log in with the OpenSSH client, and use an image built offline from
# busybox-static (no public registry is needed); the sftp test lends the
# image the host's sftp-server.
engine_missing=()
have podman || engine_missing+=(podman)
have runc || engine_missing+=(runc)
have ssh || engine_missing+=(openssh-client)
# sftp through the gateway is tested with the host's sftp-server lent to the image.
[ -x /usr/lib/openssh/sftp-server ] || engine_missing+=(openssh-sftp-server)
{ [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || engine_missing+=(busybox-static)
have docker-registry || engine_missing+=(docker-registry)
if [ "${#engine_missing[@]}" -gt 0 ]; then
  if have apt-get; then
    say "installing ${engine_missing[*]} (real containers for rentals)"
    apt_install "${engine_missing[@]}" uidmap
  else
    say "missing ${engine_missing[*]}: the real-container tests and make run-real need Podman (or Docker), runc, busybox-static and the OpenSSH client"
  fi
fi
if have podman && [ "$(id -u)" -eq 0 ]; then
  say "test image $(bash "$(dirname "$0")/podman-engine.sh" image)"
fi
