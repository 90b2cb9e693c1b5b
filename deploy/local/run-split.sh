#!/usr/bin/env bash
# Split mode without Docker: every service, the gateway and one provisioner
# worker as its own process on its own port, each service on its own
# database role, talking only over HTTP and RabbitMQ (docs/deploy.md,
# "Split mode"). The processes are those of deploy/local/Procfile.
#
# Needs Postgres and RabbitMQ as `make run` does (`make run-split` starts
# them first). Ctrl-C (or TERM) stops every process; so does the end of any
# one of them, as a Procfile runner would, so a crash is never hidden.
#
# Settings (environment):
#   PROFILE=debug|release   the cargo profile built and run (debug: it shares
#                           the build with `make test`; release: faster code)
#   GPUMARKET_*             passed through to every process (ports, URLs,
#                           database, broker: libs/platform/src/config.rs)
#   GPUMARKET_OPERATOR_EMAIL, GPUMARKET_OPERATOR_PASSWORD
#                           when both are set, that operator is created
set -euo pipefail

cd "$(dirname "$0")/../.."

PROFILE=${PROFILE:-debug}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/gpumarket-target}
case "$PROFILE" in
  debug) cargo build --bin gpumarket ;;
  release) cargo build --release --bin gpumarket ;;
  *) echo "PROFILE must be debug or release, not $PROFILE" >&2; exit 2 ;;
esac
BIN="$CARGO_TARGET_DIR/$PROFILE/gpumarket"

export GPUMARKET_BIND_HOST=${GPUMARKET_BIND_HOST:-127.0.0.1}
# The provisioner worker's /metrics, /healthz and /readyz (no API).
export GPUMARKET_PROVISIONER_PORT=${GPUMARKET_PROVISIONER_PORT:-8086}
# The services and their ports come from the binary's registry
# (src/services.rs): `gpumarket services` prints "name port" in start order.
declare -A PORTS=([provisioner]=$GPUMARKET_PROVISIONER_PORT)
SERVICES=()
while read -r name port; do
  SERVICES+=("$name")
  PORTS[$name]=$port
  upper=${name^^}
  export "GPUMARKET_${upper}_PORT=$port"
  # Every process could derive the URLs from the ports; setting them
  # explicitly is what a real deployment does, and it keeps the processes'
  # views equal.
  if [[ $name != gateway ]]; then
    url_var="GPUMARKET_${upper}_URL"
    export "$url_var=${!url_var:-http://127.0.0.1:$port}"
  fi
done < <("$BIN" services)
if [[ ${#SERVICES[@]} -eq 0 ]]; then
  echo "run-split: '$BIN services' listed no service" >&2
  exit 1
fi
# The eight processes open 21 pools between them (docs/deploy.md, "Postgres
# connections"): 84 connections at the default of 4 per pool, near
# Postgres's default 100.
export GPUMARKET_DB_POOL_SIZE=${GPUMARKET_DB_POOL_SIZE:-2}

# Migrations run as the configured (admin) user, before the roles are used.
GPUMARKET_DB_ROLE_PER_SERVICE=false "$BIN" migrate
export GPUMARKET_DB_ROLE_PER_SERVICE=true

if [[ -n "${GPUMARKET_OPERATOR_EMAIL:-}" && -n "${GPUMARKET_OPERATOR_PASSWORD:-}" ]]; then
  # An existing operator is not a reason to stop.
  "$BIN" admin create-operator || echo "run-split: operator not created (it may exist already)" >&2
fi

# name|arguments: each service, then the worker (deploy/local/Procfile
# lists the same).
PROCESSES=()
for name in "${SERVICES[@]}"; do
  PROCESSES+=("$name|serve $name")
done
PROCESSES+=("provisioner|worker provisioner")

declare -A PIDS=()
stopping=0

stop_all() {
  stopping=1
  trap - INT TERM
  for name in "${!PIDS[@]}"; do
    kill -TERM "${PIDS[$name]}" 2>/dev/null || true
  done
  # A process still there after five seconds is killed.
  for _ in $(seq 50); do
    local alive=0
    for name in "${!PIDS[@]}"; do
      if kill -0 "${PIDS[$name]}" 2>/dev/null; then alive=1; fi
    done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  for name in "${!PIDS[@]}"; do
    kill -KILL "${PIDS[$name]}" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

width=11
for entry in "${PROCESSES[@]}"; do
  name=${entry%%|*}
  read -r -a args <<<"${entry#*|}"
  prefix=$(printf "%-${width}s| " "$name")
  # Process substitution, not a pipe, so that $! is the service's own pid.
  "$BIN" "${args[@]}" > >(sed -u "s/^/$prefix/") 2>&1 &
  PIDS[$name]=$!
done

ready() {
  curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$1/readyz"
}

deadline=$((SECONDS + ${READY_TIMEOUT_SECONDS:-120}))
for name in "${SERVICES[@]}" provisioner; do
  until ready "${PORTS[$name]}"; do
    if ! kill -0 "${PIDS[$name]}" 2>/dev/null; then
      echo "run-split: $name exited before it was ready" >&2
      stop_all
      exit 1
    fi
    if ((SECONDS > deadline)); then
      echo "run-split: $name is not ready on port ${PORTS[$name]}" >&2
      stop_all
      exit 1
    fi
    sleep 0.3
  done
done

echo
echo "gpumarket is running in split mode (one process each, pids below)."
for entry in "${PROCESSES[@]}"; do
  name=${entry%%|*}
  port=${PORTS[$name]:-none}
  printf "  %-11s pid %-7s port %s\n" "$name" "${PIDS[$name]}" "$port"
done
echo "  GraphiQL:   http://127.0.0.1:$GPUMARKET_GATEWAY_PORT/graphql"
echo "  binary:     $BIN (e.g. for '$BIN agent --machine-id ... --token ...')"
echo "Ctrl-C stops them all."
echo

# The first process to end ends the run.
set +e
wait -n "${PIDS[@]}"
status=$?
set -e
if [[ $stopping == 0 ]]; then
  for name in "${!PIDS[@]}"; do
    if ! kill -0 "${PIDS[$name]}" 2>/dev/null; then
      echo "run-split: $name exited (status $status); stopping the others" >&2
    fi
  done
  stop_all
  exit "$status"
fi
