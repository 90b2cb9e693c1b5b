//! The command-line client: `gpumarket host ...` and `gpumarket offers ...`
//! talk to the public GraphQL API with an API key, exactly as a user's own
//! script would. See `docs/cli.md`.
//!
//! Exit codes: 0 on success, 1 when the API answers an error (printed as
//! `CODE: message` on stderr), 2 for a usage mistake caught before any
//! request (a malformed offer query, a missing API key, a bad decimal).

mod host;
mod offers;
mod output;

use std::io::Write;

use clap::Args;
use serde_json::Value;

use crate::client::{Client, GraphQlError};

pub use host::HostCommand;
pub use offers::OffersCommand;

/// Where the API is and who is calling; accepted before or after the verb.
#[derive(Args, Debug, Clone)]
pub struct ApiArgs {
    /// API key, sent only as `Authorization: Bearer <key>`.
    #[arg(long, env = "GPUMARKET_API_KEY", hide_env_values = true, global = true)]
    pub api_key: Option<String>,
    /// The gateway's base URL.
    #[arg(
        long,
        env = "GPUMARKET_API_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub api_url: String,
    /// Print the API's answer as JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct HostArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    #[command(subcommand)]
    pub command: HostCommand,
}

#[derive(Args, Debug)]
pub struct OffersArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    #[command(subcommand)]
    pub command: OffersCommand,
}

/// Why a command failed, and so its exit code.
#[derive(Debug)]
pub enum CliError {
    /// Caught before any request: exit 2. Printed as is.
    Usage(String),
    /// The API answered an error: exit 1, printed `CODE: message`.
    Api(GraphQlError),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Api(_) => 1,
        }
    }
}

impl From<GraphQlError> for CliError {
    fn from(e: GraphQlError) -> Self {
        CliError::Api(e)
    }
}

/// Runs `gpumarket host ...`; returns the process exit code.
pub async fn run_host(args: HostArgs) -> i32 {
    finish(host::run(&args.api, args.command).await)
}

/// Runs `gpumarket offers ...`; returns the process exit code.
pub async fn run_offers(args: OffersArgs) -> i32 {
    finish(offers::run(&args.api, args.command).await)
}

fn finish(result: Result<(), CliError>) -> i32 {
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            match &e {
                CliError::Usage(message) => eprintln!("{message}"),
                CliError::Api(error) => eprintln!("{}: {}", error.code, error.message),
            }
            e.exit_code()
        }
    };
    // The caller exits the process right away, which runs no destructors.
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    code
}

impl ApiArgs {
    /// A client carrying the key, when there is one.
    fn client(&self) -> Client {
        let client = Client::new(&self.api_url);
        match self.api_key.as_deref().map(str::trim) {
            Some(key) if !key.is_empty() => client.with_token(key),
            _ => client,
        }
    }

    /// A client that must carry a key (host commands).
    fn authenticated(&self) -> Result<Client, CliError> {
        match self.api_key.as_deref().map(str::trim) {
            Some(key) if !key.is_empty() => Ok(self.client()),
            _ => Err(CliError::Usage(
                "error: this command needs an API key: pass --api-key or set GPUMARKET_API_KEY"
                    .into(),
            )),
        }
    }

    /// `value` as pretty JSON, or `table()` printed.
    fn print(&self, value: &Value, table: impl FnOnce() -> String) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
            );
        } else {
            println!("{}", table());
        }
    }
}
