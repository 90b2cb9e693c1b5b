# One target directory outside the clone so that rebuilds are incremental.
export CARGO_TARGET_DIR ?= /var/tmp/gpumarket-target

NEXTEST := $(shell cargo nextest --version >/dev/null 2>&1 && echo yes)

.PHONY: run run-real run-split test services lint fmt sdl deploy-validate bench bench-smoke security faults web web-test

## make run: start Postgres and RabbitMQ if needed, migrate, seed, run everything.
run: services
	cargo run --bin gpumarket -- dev

## make run-real: `make run`, plus one machine (local-podman-01) whose agent runs each rental as
## a real container of a local Podman (simulated GPU) and serves SSH on 127.0.0.1:2222
## (deploy/local/podman-engine.sh; docs/real-hosts.md). Needs root for Podman's networks.
REAL_ENGINE_DIR ?= /var/tmp/gpumarket-podman
run-real: services
	bash deploy/local/podman-engine.sh image >/dev/null
	cargo run --bin gpumarket -- dev --engine-socket "$$(bash deploy/local/podman-engine.sh up $(REAL_ENGINE_DIR))"

## make run-split: the same, each service, the gateway and the worker as its own process
## (own port, own database role; no Docker, no demo seed). deploy/local/run-split.sh.
run-split: services
	bash deploy/local/run-split.sh

## make test: the same readiness step, then the whole suite: the Rust tests, then the web
## front end's build checks and its browser tests (web/e2e, Debian's Chromium).
test: services
ifeq ($(NEXTEST),yes)
	cargo nextest run --workspace --no-fail-fast
else
	cargo test --workspace --no-fail-fast -- --skip faults::
endif
	$(MAKE) bench-smoke
	$(MAKE) web-test

## make web: the front end (web/): install, check the generated GraphQL types against
## api-specs/graphql/schema.graphql, type-check and build web/dist (served at /portal, /billing).
web:
	cd web && npm ci --no-audit --no-fund && npm run codegen:check && npm run typecheck && npm run build

## make web-test: the browser tests against a fresh `gpumarket dev` stack (docs/testing.md).
## `services` installs Chromium, Node.js and npm on Debian/Ubuntu (deploy/local/ensure-services.sh).
web-test: services web
	@command -v chromium >/dev/null 2>&1 || { echo "web-test needs Chromium, which deploy/local/ensure-services.sh installs on Debian/Ubuntu; elsewhere install it and run again"; exit 1; }
	bash web/e2e/run.sh

## make security: the security suite alone (docs/security.md); `make test` runs it too.
security: services
	cargo nextest run -p gpumarket --test system -E 'test(/security::/)'

## make faults: the fault suite (docs/reliability.md, which it rewrites): split mode under load
## while processes are SIGKILLed and RabbitMQ and PostgreSQL restarted, then the invariants.
## It runs on a PostgreSQL cluster and a RabbitMQ node of its own (tests/faults/infra.sh).
FAULTS_INFRA := $(CURDIR)/tests/faults/infra.sh
faults: services
	bash $(FAULTS_INFRA) up
ifeq ($(NEXTEST),yes)
	env $$(bash $(FAULTS_INFRA) env) GPUMARKET_FAULTS_INFRA=$(FAULTS_INFRA) \
	  cargo nextest run -p gpumarket --test system --ignore-default-filter --retries 0 --no-capture \
	  -E 'test(/^faults::/)'; status=$$?; bash $(FAULTS_INFRA) down; exit $$status
else
	env $$(bash $(FAULTS_INFRA) env) GPUMARKET_FAULTS_INFRA=$(FAULTS_INFRA) \
	  cargo test -p gpumarket --test system faults:: -- --nocapture; \
	  status=$$?; bash $(FAULTS_INFRA) down; exit $$status
endif

services:
	bash deploy/local/ensure-services.sh

lint:
	cargo fmt --all --check
	# No new import loop between a crate's modules (tools/import_loops.baseline
	# lists today's, which issue 19 untangles).
	python3 tools/import_loops.py
	cargo clippy --workspace --all-targets -- -D warnings
	# NVML is compiled (not run: no GPU here) so the real-host path cannot rot.
	cargo clippy -p gpumarket-host-agent --features nvml -- -D warnings

fmt:
	cargo fmt --all

## make sdl: rewrite api-specs/graphql/schema.graphql from the code.
sdl:
	UPDATE_SDL=1 cargo test -p gpumarket-gateway --test sdl

deploy-validate:
	bash deploy/validate.sh

## make bench: offer search on 100k machines, createOrder at 1/16/64 clients and order-to-running,
## then billing's usage ingest (with a raw-insert baseline), the invoicing run for 10k tenants
## and broker memory and file handles per idle and per connected agent
## (AGENTS_BENCH_ARGS="--queues N --connections M")
## (flags: make bench BENCH_ARGS="--machines 1000000" ORDER_BENCH_ARGS="--orders 1024").
## It ends with one line per goal of the scaling work, `ratio <name> = <value> (goal >= <target>)`,
## each measured beside its baseline in the same run (docs/benchmarks.md keeps them).
BENCH_RATIOS := $(CARGO_TARGET_DIR)/bench-ratios.txt
bench: services
	rm -f $(BENCH_RATIOS)
	cargo bench --bench search -- $(BENCH_ARGS)
	cargo bench --bench orders -- $(ORDER_BENCH_ARGS)
	cargo bench --bench billing -- $(BILLING_BENCH_ARGS)
	cargo bench --bench invoices -- $(INVOICE_BENCH_ARGS)
	cargo bench --bench agents -- $(AGENTS_BENCH_ARGS)
	@echo; echo "== summary: each goal beside its baseline, measured in this run =="
	@cat $(BENCH_RATIOS)

## make bench-smoke: every benchmark end to end at tiny sizes (--tiny; a debug
## build, seconds each, docs/benchmarks.md untouched), so that none can rot
## unseen; `make test` runs it.
bench-smoke: services
	cargo test --bench search -- --tiny
	cargo test --bench orders -- --tiny
	cargo test --bench billing -- --tiny
	cargo test --bench invoices -- --tiny
	cargo test --bench agents -- --tiny
