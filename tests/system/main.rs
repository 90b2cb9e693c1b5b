//! System tests: the services on random ports against a fresh database and a
//! fresh RabbitMQ vhost, driven over HTTP through the public GraphQL API.

// Test code: a failed expectation is the test's verdict.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents;
mod cancel;
mod charges;
mod cli;
mod containers;
mod crash;
mod dashboards;
mod expiry;
mod faults;
mod flow;
mod graphql_http;
mod harness;
mod idempotency;
mod invoices;
mod lifecycle;
mod limits;
mod market;
mod meters;
mod mig;
mod money_bounds;
mod observability;
mod operator;
mod payouts;
mod placement;
mod preemption;
mod processes;
mod production;
mod quota;
mod race;
mod readiness;
mod reconciler;
mod rentals;
mod replacement;
mod replay;
mod reservations;
mod retry;
mod rules;
mod runway;
mod security;
mod settlement;
mod settlement_correlation;
mod signals;
mod simulation;
mod spend;
mod split;
mod states;
mod storage;
mod subscription;
mod topups;
mod tour;
mod webhooks;
mod worker;
