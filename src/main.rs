//! `gpumarket`: one binary for every service, worker and admin verb.

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use gpumarket::dev::{self, Parts};
use platform::config::Secret;
use platform::{Config, Db};

#[derive(Parser)]
#[command(name = "gpumarket", about = "GPU cloud marketplace backend", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Migrate, run every service and worker in this process, seed a demo market.
    Dev(gpumarket::dev::RealEngine),
    /// Apply database migrations (creating the database if needed).
    Migrate,
    /// Run one service (with its relay, consumers and schedules).
    Serve {
        #[arg(value_parser = clap::builder::PossibleValuesParser::new(gpumarket::services::names()))]
        service: String,
    },
    /// List the services (name and configured port), one per line, in start
    /// order: what run-split starts and the deploy checks compare with.
    Services,
    /// Run a worker.
    Worker {
        #[arg(value_enum)]
        worker: Worker,
    },
    /// Operator tasks.
    Admin {
        #[command(subcommand)]
        command: Admin,
    },
    /// Print the public GraphQL schema (SDL).
    PrintSdl,
    /// Host: register, price, list and unlist machines (uses an API key).
    Host(gpumarket::cli::HostArgs),
    /// Renter: search offers with the compact query language.
    Offers(gpumarket::cli::OffersArgs),
    /// Run the host agent on a GPU host (simulated GPUs unless built with `nvml`).
    Agent(host_agent::AgentArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum Worker {
    Provisioner,
}

#[derive(Subcommand)]
enum Admin {
    /// Create an operator (a user of the platform tenant).
    CreateOperator {
        #[arg(long, env = "GPUMARKET_OPERATOR_EMAIL")]
        email: String,
        #[arg(long, env = "GPUMARKET_OPERATOR_PASSWORD", hide_env_values = true)]
        password: String,
    },
}

/// How long exit waits for the runtime's tasks and then the database pools'
/// threads.
const EXIT_JOIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The runtime is built here rather than by `#[tokio::main]` so that it is
/// shut down, dropping every task and the database pools they hold, and the
/// pools' threads have ended before `main` returns: a thread still in libpq
/// while the C `atexit` handlers run crashed the process now and then after
/// a clean shutdown (docs/testing.md, "Retries").
fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(run());
    runtime.shutdown_timeout(EXIT_JOIN_LIMIT);
    if !platform::db::join_pool_threads(EXIT_JOIN_LIMIT) {
        tracing::warn!("database pool threads still running at exit");
    }
    result
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Client verbs need no configuration, no database and no log output.
    let command = match cli.command {
        Command::Host(args) => std::process::exit(gpumarket::cli::run_host(args).await),
        Command::Offers(args) => std::process::exit(gpumarket::cli::run_offers(args).await),
        command => command,
    };
    let mut config = Config::from_env().context("reading configuration")?;
    gpumarket::services::configure(&mut config).context("reading the services' settings")?;
    platform::telemetry::init(&config.log_format);
    // In production (`GPUMARKET_ENV=production`) a process does not start
    // with a published development secret among those it reads: the shared
    // ones each service names, and each service's own.
    let found = match &command {
        Command::Dev(_) => gpumarket::services::development_secrets(&config, None)?,
        Command::Serve { service } => {
            gpumarket::services::development_secrets(&config, Some(service))?
        }
        Command::Worker { .. } => config.development_secrets(&Secret::ALL),
        _ => Vec::new(),
    };
    platform::config::refuse_development_secrets(&found).context("refusing to start")?;
    match command {
        Command::Dev(real) => run_dev(config, real).await,
        Command::Migrate => migrate(&config).await,
        Command::Serve { service } => serve(config, service).await,
        Command::Worker {
            worker: Worker::Provisioner,
        } => run_provisioner(config).await,
        Command::Admin {
            command: Admin::CreateOperator { email, password },
        } => {
            let db = Db::connect(&config.database_url_for("quota"), 1)?;
            let principal = quota::create_operator(&db, &email, &password).await?;
            println!(
                "operator {} created in tenant {}",
                principal.email, principal.tenant_id
            );
            Ok(())
        }
        Command::PrintSdl => {
            print!("{}", gateway::sdl());
            Ok(())
        }
        Command::Services => {
            for service in gpumarket::services::SERVICES {
                println!("{} {}", service.name(), service.port(&config));
            }
            Ok(())
        }
        Command::Agent(args) => {
            host_agent::run_host(args).await?;
            Ok(())
        }
        // Handled above, before the configuration is read.
        Command::Host(_) | Command::Offers(_) => Ok(()),
    }
}

/// Creates the database when missing and applies migrations.
async fn migrate(config: &Config) -> anyhow::Result<()> {
    let url = config.database_url.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let name = url
            .rsplit('/')
            .next()
            .and_then(|tail| tail.split('?').next())
            .context("GPUMARKET_DATABASE_URL has no database name")?
            .to_owned();
        let admin = platform::config::replace_db_name(&url, "postgres");
        platform::db::create_database(&admin, &name)?;
        platform::db::migrate(&url)?;
        Ok(())
    })
    .await??;
    tracing::info!("migrations applied");
    Ok(())
}

/// SIGINT (Ctrl-C) and SIGTERM (what Kubernetes, Docker, systemd and
/// `run-split.sh` send to stop a process), installed before anything starts
/// so that a signal arriving during startup is not the default disposition's
/// (killed, no clean exit).
struct Shutdown {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Shutdown {
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt()).context("handling SIGINT")?,
                terminate: signal(SignalKind::terminate()).context("handling SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for either signal; its name, for the log.
    async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "SIGINT",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

/// The provisioning worker, with its own HTTP listener on
/// `GPUMARKET_PROVISIONER_PORT` for `/metrics`, `/healthz` and `/readyz`
/// (its database answers). On SIGINT or SIGTERM the listener stops and the
/// process exits 0; a job it was running keeps its progress in Postgres and
/// is taken over by another worker when its lease runs out.
///
/// A port that is set must be free, or the worker does not start (every
/// deployment here sets it: Kubernetes probes it). Left unset, the default
/// (8086) being taken, typically by another worker on the same machine, is
/// only a warning: the worker runs without the listener.
async fn run_provisioner(config: Config) -> anyhow::Result<()> {
    let mut shutdown = Shutdown::install()?;
    let port_set = std::env::var_os("GPUMARKET_PROVISIONER_PORT").is_some();
    let port = config
        .settings::<provisioner::ProvisionerSettings>()
        .context("reading the provisioner's settings")?
        .port;
    let config = Arc::new(config);
    let db = Db::connect(&config.database_url_for("provisioner"), config.db_pool_size)?;
    let server = match platform::http::serve_named(
        "provisioner",
        &config.bind_host,
        port,
        db.clone(),
        config.service_token.clone(),
        |_| {},
    ) {
        Ok((server, port)) => {
            tracing::info!(port, "provisioner metrics and probes listening");
            Some(server)
        }
        Err(error) if !port_set && error.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::warn!(
                %error,
                port,
                "the default metrics port is taken: running without /metrics, /healthz \
                 and /readyz; set GPUMARKET_PROVISIONER_PORT (0: any free port) to serve them"
            );
            None
        }
        Err(error) => {
            return Err(error).with_context(|| {
                format!("binding the provisioner's HTTP port {port} (GPUMARKET_PROVISIONER_PORT)")
            });
        }
    };
    let handle = server.as_ref().map(actix_web::dev::Server::handle);
    let serving = async {
        match server {
            Some(server) => server.await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        result = provisioner::run(config.clone(), db) => match result {
            Ok(()) => Err(anyhow::anyhow!("the provisioner stopped")),
            Err(error) => Err(error.into()),
        },
        result = serving => result.context("server failed"),
        signal = shutdown.recv() => {
            tracing::info!(signal, "provisioner stopping");
            Ok(())
        }
    };
    if let Some(handle) = handle {
        handle.stop(true).await;
    }
    result
}

/// A Postgres on this machine is reached without TLS unless the URL asks
/// for it: libpq's default (`sslmode=prefer`) negotiates TLS with a server
/// that has it on (Debian's default), which costs a handshake per
/// connection and encryption of every query on the loopback, for no
/// protection there (docs/benchmarks.md, "Reading the createOrder numbers").
fn without_tls_when_local(url: &str) -> String {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return url.to_owned();
    };
    let local = matches!(
        parsed.host_str(),
        Some("127.0.0.1" | "localhost" | "[::1]" | "::1")
    );
    if !local || parsed.query_pairs().any(|(k, _)| k == "sslmode") {
        return url.to_owned();
    }
    let joiner = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joiner}sslmode=disable")
}

async fn run_dev(mut config: Config, real: gpumarket::dev::RealEngine) -> anyhow::Result<()> {
    config.database_url = without_tls_when_local(&config.database_url);
    if real.engine_socket.is_some() {
        // Every step goes to the machines' agents: the demo's simulated
        // agents carry theirs out on the simulated state, the real one on
        // the engine.
        config.update_settings(|s: &mut provisioner::ProvisionerSettings| {
            s.driver = "agent".into();
        })?;
    }
    migrate(&config).await?;
    let quota_db = Db::connect(&config.database_url_for("quota"), 1)?;
    match quota::create_operator(
        &quota_db,
        gpumarket::seed::OPERATOR_EMAIL,
        gpumarket::seed::DEMO_PASSWORD,
    )
    .await
    {
        Ok(_) | Err(quota::Error::Conflict(_)) => {}
        Err(e) => return Err(e).context("creating the demo operator"),
    }
    let mut stack = dev::start(config, Parts::ALL).await?;
    let seeded = gpumarket::seed::demo_market(&stack.gateway_url, real.engine_socket.is_some())
        .await
        .context("seeding the demo market")?;
    // The demo hosts' agents: simulated GPUs, the real protocol.
    let mut real_machine = None;
    for agent in &seeded.agents {
        let task = if agent.real {
            real_machine = Some(agent.machine_id);
            dev::spawn_real_agent(&stack.config, agent, &real)?
        } else {
            dev::spawn_agent(&stack.config, agent)?
        };
        stack.adopt(task);
    }
    println!();
    println!("gpumarket is running.");
    println!("  GraphiQL:        {}/graphql", stack.gateway_url);
    println!("  renter API key:  {}", seeded.renter_api_key);
    println!("  host API key:    {}", seeded.host_api_key);
    println!(
        "  operator login:  {} / {}",
        seeded.operator_email,
        gpumarket::seed::DEMO_PASSWORD
    );
    if let Some(id) = real_machine {
        println!(
            "  real containers: machine {id} (local-podman-01), SSH gateway 127.0.0.1:{}",
            real.ssh_port
        );
        println!("                   order it with image \"localhost/gpumarket-test:latest\"");
    }
    println!("Use a key as the header  Authorization: Bearer <key>  (Ctrl-C stops).");
    println!();
    // Installed only now, so that Ctrl-C still interrupts a slow start
    // (migrations, the seed) the default way.
    let mut shutdown = Shutdown::install()?;
    tokio::select! {
        result = stack.wait() => result,
        signal = shutdown.recv() => {
            tracing::info!(signal, "stopping");
            Ok(())
        }
    }
}

/// Runs one service until it fails or is told to stop. On SIGINT or SIGTERM
/// the listener stops accepting, requests in flight finish (up to
/// `platform::http::SHUTDOWN_TIMEOUT`), background tasks (relay, consumers,
/// schedules) are dropped where they stand, as a crash would leave them,
/// which they are built to survive, and the process exits 0.
async fn serve(config: Config, service: String) -> anyhow::Result<()> {
    let mut shutdown = Shutdown::install()?;
    let config = Arc::new(config);
    let service = gpumarket::services::find(&service)
        .with_context(|| format!("no service called {service}"))?;
    let mut tasks = tokio::task::JoinSet::new();
    for task in service
        .tasks(config.clone())
        .map_err(|e| anyhow::anyhow!("starting {}'s tasks: {e}", service.name()))?
    {
        tasks.spawn(task.future);
    }
    let (server, _port) = service
        .server(config.clone())
        .map_err(|e| anyhow::anyhow!("starting {}: {e}", service.name()))?;
    let handle = server.handle();
    tokio::select! {
        result = server => result.context("server failed"),
        // The gateway and quota have no background task, and an empty set's
        // `join_next` is ready at once: the pattern keeps that from ending them.
        Some(_) = tasks.join_next() => anyhow::bail!("a background task ended"),
        signal = shutdown.recv() => {
            tracing::info!(signal, "stopping");
            handle.stop(true).await;
            // Dropping the set aborts the background tasks.
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::without_tls_when_local;

    #[test]
    fn only_a_local_database_without_an_sslmode_goes_without_tls() {
        assert_eq!(
            without_tls_when_local("postgres://postgres@127.0.0.1:5432/gpumarket"),
            "postgres://postgres@127.0.0.1:5432/gpumarket?sslmode=disable"
        );
        assert_eq!(
            without_tls_when_local("postgres://u@localhost/db?application_name=x"),
            "postgres://u@localhost/db?application_name=x&sslmode=disable"
        );
        for kept in [
            "postgres://u@127.0.0.1/db?sslmode=require",
            "postgres://u@db.internal:5432/gpumarket",
        ] {
            assert_eq!(without_tls_when_local(kept), kept);
        }
    }
}
