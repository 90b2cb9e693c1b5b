#!/usr/bin/env bash
# End-to-end test of the web front end against a real stack:
#   bash web/e2e/run.sh
# Builds the front end, starts `gpumarket dev` on its own fresh database and
# RabbitMQ vhost with the gateway on a free port serving web/dist, waits for
# /readyz, runs the Playwright tests (playwright-core driving Debian's
# Chromium, /usr/bin/chromium; the test also runs the agent install command
# it was shown, with simulated GPUs, to see the machine online), then stops
# the stack and drops the database, the vhost and the machines' broker
# users. Needs PostgreSQL (127.0.0.1:5432, trust) and RabbitMQ with
# its management plugin (5672, 15672, guest/guest): `make services`.
#
# GPUMARKET_BIN: the gpumarket binary (default: built with cargo into
# $CARGO_TARGET_DIR or target/). GPUMARKET_STRIPE_DOUBLE_BIN: the Stripe test
# double (default: built likewise), which plays Stripe for billing and for the
# tests' Stripe.js stand-in. CHROMIUM: the browser (default /usr/bin/chromium).
# GPUMARKET_E2E_TESTS: test files to run (e.g. "billing.test.mjs"; default
# every e2e/*.test.mjs). Each run builds into a directory of its own, so two
# runs at once do not serve each other's half-written assets.
# Screenshots go to web/e2e/screenshots/; the stack's log to web/e2e/.run/.
set -euo pipefail
WEB=$(cd "$(dirname "$0")/.." && pwd)
ROOT=$(cd "$WEB/.." && pwd)
cd "$WEB"

export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [[ ! -x $CHROMIUM ]]; then
  echo "no Chromium at $CHROMIUM: apt-get install -y chromium" >&2
  exit 1
fi

step() { printf '== %s\n' "$*"; }
started=$SECONDS

# --- the front end ---------------------------------------------------------
if [[ ! -d node_modules ]]; then
  step "npm ci"
  npm ci --no-audit --no-fund
fi
DIST=$(mktemp -d "${TMPDIR:-/tmp}/gpumarket-web-dist.XXXXXX")
step "building the front end into $DIST"
npx vite build --logLevel warn --outDir "$DIST" --emptyOutDir

# --- the binary --------------------------------------------------------------
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${GPUMARKET_BIN:-$TARGET/debug/gpumarket}
if [[ -z ${GPUMARKET_BIN:-} ]]; then
  step "cargo build --bin gpumarket"
  (cd "$ROOT" && cargo build --quiet --bin gpumarket)
fi
# The Stripe test double (libs/stripe-double) as a process: billing's Stripe,
# and what the tests' Stripe.js stand-in confirms payments with.
STRIPE_DOUBLE_BIN=${GPUMARKET_STRIPE_DOUBLE_BIN:-$TARGET/debug/stripe-double}
if [[ -z ${GPUMARKET_STRIPE_DOUBLE_BIN:-} ]]; then
  step "cargo build --bin stripe-double"
  (cd "$ROOT" && cargo build --quiet -p gpumarket-stripe-double --bin stripe-double)
fi

# --- a fresh database and vhost ------------------------------------------------
NAME="gpumarket_web_e2e_$(date +%s)_$$"
PG=${GPUMARKET_E2E_PG:-postgres://postgres@127.0.0.1:5432}
MGMT=${GPUMARKET_E2E_RABBITMQ_MANAGEMENT:-http://guest:guest@127.0.0.1:15672}
RUN_DIR=$WEB/e2e/.run/$NAME
mkdir -p "$RUN_DIR"
LOG=$RUN_DIR/gpumarket.log
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
STACK_PID=
STRIPE_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
STRIPE_PID=
STRIPE_SECRET_KEY=sk_test_e2e_double
STRIPE_PUBLISHABLE_KEY=pk_test_e2e_double
STRIPE_WEBHOOK_SECRET="whsec_e2e_$NAME"

cleanup() {
  local rc=$?
  if [[ -n $STRIPE_PID ]]; then kill -TERM "$STRIPE_PID" 2>/dev/null || true; wait "$STRIPE_PID" 2>/dev/null || true; fi
  if [[ -n $STACK_PID ]] && kill -0 "$STACK_PID" 2>/dev/null; then
    kill -TERM "$STACK_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$STACK_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$STACK_PID" 2>/dev/null || true
    wait "$STACK_PID" 2>/dev/null || true
  fi
  # Agent broker users are broker-wide, one per machine and token
  # generation (agent-<machine>.<generation>): remove every one of this run's.
  local id user users
  users=$(curl -fsS "$MGMT/api/users" 2>/dev/null |
    python3 -c 'import json, sys; print("\n".join(u["name"] for u in json.load(sys.stdin)))' 2>/dev/null || true)
  for id in $(psql -Atq "$PG/$NAME" -c "SELECT id FROM catalog.machines" 2>/dev/null); do
    for user in $(grep "^agent-$id" <<<"$users" || true); do
      curl -fsS -X DELETE "$MGMT/api/users/$user" >/dev/null 2>&1 || true
    done
  done
  psql -q "$PG/postgres" -c "DROP DATABASE IF EXISTS \"$NAME\" WITH (FORCE)" >/dev/null 2>&1 || true
  curl -fsS -X DELETE "$MGMT/api/vhosts/$NAME" >/dev/null 2>&1 || true
  rm -rf "$DIST"
  if [[ $rc -ne 0 ]]; then
    echo "failed (exit $rc); the stack's log: $LOG" >&2
    tail -n 40 "$LOG" >&2 2>/dev/null || true
  fi
  exit $rc
}
trap cleanup EXIT INT TERM

step "vhost $NAME"
curl -fsS -X PUT -H 'content-type: application/json' -d '{}' "$MGMT/api/vhosts/$NAME" >/dev/null
curl -fsS -X PUT -H 'content-type: application/json' \
  -d '{"configure":".*","write":".*","read":".*"}' "$MGMT/api/permissions/$NAME/guest" >/dev/null

# --- Stripe (the test double) ------------------------------------------------------
step "stripe-double on 127.0.0.1:$STRIPE_PORT"
"$STRIPE_DOUBLE_BIN" --port "$STRIPE_PORT" --secret-key "$STRIPE_SECRET_KEY" \
  --publishable-key "$STRIPE_PUBLISHABLE_KEY" --webhook-url "http://127.0.0.1:$PORT/webhooks/stripe" \
  --webhook-secret "$STRIPE_WEBHOOK_SECRET" >"$RUN_DIR/stripe-double.log" 2>&1 &
STRIPE_PID=$!
for i in $(seq 1 100); do
  if grep -q 'listening on' "$RUN_DIR/stripe-double.log" 2>/dev/null; then break; fi
  if ! kill -0 "$STRIPE_PID" 2>/dev/null || [[ $i -eq 100 ]]; then
    echo "stripe-double did not start:" >&2; cat "$RUN_DIR/stripe-double.log" >&2; exit 1
  fi
  sleep 0.1
done

# --- the stack -----------------------------------------------------------------
# GPUMARKET_WEBHOOKS_ALLOW_LOCAL=true: webhooks.test.mjs receives its
# deliveries on 127.0.0.1 (a receiver in the test process) to check their
# signatures and see them delivered; this machine may have no internet or DNS.
# It allows only http and loopback: private, link-local and metadata
# addresses stay refused, so the page's VALIDATION error for
# http://10.0.0.1/ is the production one.
step "gpumarket dev: database $NAME, gateway on 127.0.0.1:$PORT"
GPUMARKET_DATABASE_URL="$PG/$NAME" \
GPUMARKET_AMQP_URL="amqp://guest:guest@127.0.0.1:5672/$NAME" \
GPUMARKET_GATEWAY_PORT=$PORT \
GPUMARKET_CATALOG_PORT=0 GPUMARKET_ORDERING_PORT=0 GPUMARKET_QUOTA_PORT=0 \
GPUMARKET_METERING_PORT=0 GPUMARKET_BILLING_PORT=0 GPUMARKET_PROVISIONER_PORT=0 \
GPUMARKET_DB_POOL_SIZE=2 \
GPUMARKET_WEBHOOKS_ALLOW_LOCAL=true \
GPUMARKET_STRIPE_API_BASE="http://127.0.0.1:$STRIPE_PORT/" GPUMARKET_STRIPE_SECRET_KEY=$STRIPE_SECRET_KEY \
GPUMARKET_STRIPE_WEBHOOK_SECRETS=$STRIPE_WEBHOOK_SECRET GPUMARKET_STRIPE_PUBLISHABLE_KEY=$STRIPE_PUBLISHABLE_KEY \
GPUMARKET_WEB_DIR="$DIST" GPUMARKET_PUBLIC_URL="http://127.0.0.1:$PORT" \
GPUMARKET_LOG_FORMAT=json \
  "$BIN" dev >"$LOG" 2>&1 &
STACK_PID=$!

URL="http://127.0.0.1:$PORT"
for i in $(seq 1 240); do
  if curl -fsS "$URL/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$STACK_PID" 2>/dev/null; then
    echo "gpumarket dev exited before it was ready" >&2
    exit 1
  fi
  if [[ $i -eq 240 ]]; then
    echo "gpumarket dev not ready after 120 s" >&2
    exit 1
  fi
  sleep 0.5
done
step "ready after $((SECONDS - started)) s"

# --- the tests -------------------------------------------------------------------
TESTS=(e2e/)
if [[ -n ${GPUMARKET_E2E_TESTS:-} ]]; then
  TESTS=()
  for t in $GPUMARKET_E2E_TESTS; do TESTS+=("e2e/$t"); done
fi
step "playwright: $URL/portal (${TESTS[*]})"
GPUMARKET_WEB_E2E_URL=$URL GPUMARKET_E2E_AGENT_BIN=$BIN GPUMARKET_E2E_VHOST=$NAME \
GPUMARKET_E2E_AGENT_LOG=$RUN_DIR/agent.log GPUMARKET_E2E_STRIPE_URL="http://127.0.0.1:$STRIPE_PORT/" \
  node --test --test-concurrency=1 "${TESTS[@]}"
step "passed in $((SECONDS - started)) s; screenshots in web/e2e/screenshots/"
