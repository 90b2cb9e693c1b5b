//! The `gpumarket` binary's library half: starting any set of services and
//! workers in one process (`gpumarket dev`, and the tests), and seeding the
//! demo market through the public API.

pub mod cli;
pub mod client;
pub mod dev;
pub mod seed;
pub mod services;
pub mod simulated_agent;
