#!/usr/bin/env bash
# A PostgreSQL cluster and a RabbitMQ node of the fault suite's own
# (`make faults`, docs/reliability.md), so that restarting them hurts no
# other test, `make run` or anything else on the machine:
#   PostgreSQL on 127.0.0.1:$FAULTS_PG_PORT (trust auth),
#   RabbitMQ on 127.0.0.1:$FAULTS_AMQP_PORT, management on $FAULTS_MGMT_PORT.
# Built from the same packages ensure-services.sh installs.
#
#   infra.sh up                 fresh data directories, both started
#   infra.sh down               both stopped, data removed
#   infra.sh restart-postgres   immediate shutdown (as in a crash), then start
#   infra.sh restart-rabbitmq   the node stopped, then started again
#   infra.sh env                the GPUMARKET_* variables that point at them
set -euo pipefail

ROOT=${FAULTS_DIR:-/var/tmp/gpumarket-faults}
PG_PORT=${FAULTS_PG_PORT:-55432}
AMQP_PORT=${FAULTS_AMQP_PORT:-5673}
MGMT_PORT=${FAULTS_MGMT_PORT:-15673}
DIST_PORT=${FAULTS_DIST_PORT:-25673}
NODE=gpumarket-faults@localhost

say() { printf 'faults-infra: %s\n' "$*" >&2; }
as_user() { # user, command...: the servers refuse to run as root
  local user=$1; shift
  if [ "$(id -u)" -eq 0 ]; then runuser -u "$user" -- "$@"; else "$@"; fi
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pg_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  [ -n "$dir" ] || { say "no PostgreSQL server binaries under /usr/lib/postgresql"; exit 1; }
  printf '%s' "$dir"
}
PGDATA="$ROOT/pg/data"
pg_ctl() { as_user postgres "$(pg_bin)/pg_ctl" -D "$PGDATA" "$@"; }

rabbit_env() {
  env RABBITMQ_NODENAME="$NODE" RABBITMQ_DIST_PORT="$DIST_PORT" \
    RABBITMQ_MNESIA_BASE="$ROOT/rabbit/mnesia" RABBITMQ_LOG_BASE="$ROOT/rabbit/log" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$ROOT/rabbit/enabled_plugins" \
    RABBITMQ_CONFIG_FILE="$ROOT/rabbit/rabbitmq.conf" "$@"
}

wait_for() { # what, seconds, command...
  local what=$1 secs=$2; shift 2
  for _ in $(seq 1 "$((secs * 5))"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  say "$what did not come up within ${secs}s"; return 1
}

postgres_ready() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -Atc 'SELECT 1'; }
rabbit_ready() { curl -sf -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview"; }

start_postgres() {
  pg_ctl -o "-p $PG_PORT -k $ROOT/pg -c listen_addresses=127.0.0.1 -c max_connections=300" \
    -l "$ROOT/pg/log" -w start >/dev/null
  wait_for "postgres (faults)" 30 postgres_ready
}

start_rabbitmq() {
  # More file handles than the default 1024 (a few per quorum queue).
  (ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"; rabbit_env rabbitmq-server -detached >/dev/null 2>&1)
  wait_for "rabbitmq (faults)" 60 rabbit_ready
}

stop_all() {
  if [ -f "$PGDATA/postmaster.pid" ]; then pg_ctl -m immediate -w stop >/dev/null 2>&1 || true; fi
  if port_open "$AMQP_PORT" || port_open "$MGMT_PORT"; then stop_rabbitmq || true; fi
}

stop_rabbitmq() {
  # `shutdown` returns once the node's OS process is gone.
  if ! rabbit_env timeout 60 rabbitmqctl -n "$NODE" shutdown >/dev/null 2>&1; then
    pkill -9 -f -- "-sname $NODE|-name $NODE|nodename $NODE|$NODE" 2>/dev/null || true
  fi
}

case "${1:-}" in
  up)
    for port in "$PG_PORT" "$AMQP_PORT" "$MGMT_PORT"; do
      if port_open "$port" && ! [ -d "$ROOT" ]; then
        say "port $port is taken by something else; set FAULTS_*_PORT"; exit 1
      fi
    done
    stop_all
    rm -rf "$ROOT"
    mkdir -p "$ROOT/pg" "$ROOT/rabbit/mnesia" "$ROOT/rabbit/log"
    chown postgres "$ROOT/pg" 2>/dev/null || true
    as_user postgres "$(pg_bin)/initdb" -D "$PGDATA" -U postgres --auth=trust >/dev/null
    cat >"$ROOT/rabbit/rabbitmq.conf" <<EOF
listeners.tcp.local = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
EOF
    echo '[rabbitmq_management].' >"$ROOT/rabbit/enabled_plugins"
    chown -R rabbitmq "$ROOT/rabbit" 2>/dev/null || true
    start_postgres
    start_rabbitmq
    say "postgres on $PG_PORT, rabbitmq on $AMQP_PORT (management $MGMT_PORT)"
    ;;
  down)
    stop_all
    rm -rf "$ROOT"
    ;;
  restart-postgres)
    # Immediate: no checkpoint, every connection cut, recovery at start, as
    # after a crash of the database server.
    pg_ctl -m immediate -w stop >/dev/null
    start_postgres
    ;;
  restart-rabbitmq)
    stop_rabbitmq
    start_rabbitmq
    ;;
  env)
    echo "GPUMARKET_DATABASE_URL=postgres://postgres@127.0.0.1:$PG_PORT/gpumarket"
    echo "GPUMARKET_AMQP_URL=amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2f"
    echo "GPUMARKET_RABBITMQ_MANAGEMENT_URL=http://guest:guest@127.0.0.1:$MGMT_PORT"
    ;;
  *)
    echo "usage: $0 up|down|restart-postgres|restart-rabbitmq|env" >&2
    exit 2
    ;;
esac
