//! The host agent: the process that runs on a host's machine, started with
//! the machine's agent token, reporting inventory and heartbeats and carrying
//! out provisioning commands from its own queue `host.<machine_id>` over
//! RabbitMQ with per-machine credentials (DESIGN sections 3 and 4).
//!
//! Status: not implemented yet. The walking skeleton provisions through the
//! simulated driver in `workers/provisioner`; the agent, its protocol and the
//! `agent` driver are the subject of the catalog/host-agent and ordering
//! issues. `registerMachine` already issues the agent token it will use.
