//! `gpumarket`: one binary for every service, worker and admin verb.

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use gpumarket::dev::{self, Parts};
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
    Dev,
    /// Apply database migrations (creating the database if needed).
    Migrate,
    /// Run one service (with its relay and consumer).
    Serve {
        #[arg(value_enum)]
        service: Service,
    },
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
enum Service {
    Gateway,
    Catalog,
    Ordering,
    Quota,
    Metering,
    Billing,
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Client verbs need no configuration, no database and no log output.
    let command = match cli.command {
        Command::Host(args) => std::process::exit(gpumarket::cli::run_host(args).await),
        Command::Offers(args) => std::process::exit(gpumarket::cli::run_offers(args).await),
        command => command,
    };
    let config = Config::from_env().context("reading configuration")?;
    platform::telemetry::init(&config.log_format);
    match command {
        Command::Dev => run_dev(config).await,
        Command::Migrate => migrate(&config).await,
        Command::Serve { service } => serve(config, service).await,
        Command::Worker {
            worker: Worker::Provisioner,
        } => {
            let db = Db::connect(&config.database_url_for("provisioner"), config.db_pool_size)?;
            provisioner::run(Arc::new(config), db).await?;
            Ok(())
        }
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
        Command::Agent(args) => {
            host_agent::run(args.into_config()?).await?;
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

async fn run_dev(config: Config) -> anyhow::Result<()> {
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
    let seeded = gpumarket::seed::demo_market(&stack.gateway_url)
        .await
        .context("seeding the demo market")?;
    // The demo hosts' agents: simulated GPUs, the real protocol.
    for agent in &seeded.agents {
        let task = dev::spawn_agent(&stack.config, agent)?;
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
    println!("Use a key as the header  Authorization: Bearer <key>  (Ctrl-C stops).");
    println!();
    tokio::select! {
        result = stack.wait() => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

async fn serve(config: Config, service: Service) -> anyhow::Result<()> {
    let config = Arc::new(config);
    let db = |name: &str| Db::connect(&config.database_url_for(name), config.db_pool_size);
    let mut tasks = tokio::task::JoinSet::new();
    let server = match service {
        Service::Gateway => gateway::build(config.clone())?.0,
        Service::Catalog => {
            tasks.spawn(catalog::heartbeats::run_consumer(
                config.clone(),
                db("catalog")?,
            ));
            tasks.spawn(catalog::reliability::run_offline_sweeper(
                config.clone(),
                db("catalog")?,
            ));
            // Preemption events leave through the catalog's outbox.
            tasks.spawn(platform::outbox::run_relay(
                db("catalog")?,
                config.clone(),
                catalog::SCHEMA,
            ));
            catalog::build(config.clone(), db("catalog")?)?.0
        }
        Service::Quota => quota::build(config.clone(), db("quota")?)?.0,
        Service::Ordering => {
            tasks.spawn(platform::outbox::run_relay(
                db("ordering")?,
                config.clone(),
                ordering::SCHEMA,
            ));
            tasks.spawn(ordering::preemption::run_consumer(
                config.clone(),
                db("ordering")?,
            ));
            ordering::build(config.clone(), db("ordering")?)?.0
        }
        Service::Metering => {
            tasks.spawn(platform::outbox::run_relay(
                db("metering")?,
                config.clone(),
                metering::SCHEMA,
            ));
            tasks.spawn(metering::run_consumer(config.clone(), db("metering")?));
            metering::build(config.clone(), db("metering")?)?.0
        }
        Service::Billing => {
            // Exhausted balances leave through billing's outbox.
            tasks.spawn(platform::outbox::run_relay(
                db("billing")?,
                config.clone(),
                billing::SCHEMA,
            ));
            let (c, d) = (config.clone(), db("billing")?);
            tasks.spawn(async move {
                if let Err(error) = billing::run_consumer(c, d).await {
                    tracing::error!(%error, "billing consumer stopped");
                }
            });
            // Monthly caps and low-runway warnings (billing::spend).
            let (c, d) = (config.clone(), db("billing")?);
            tasks.spawn(async move {
                if let Err(error) = billing::spend::run_watch(c, d).await {
                    tracing::error!(%error, "spend watch stopped");
                }
            });
            let (c, d) = (config.clone(), db("billing")?);
            tasks.spawn(async move {
                if let Err(error) = billing::schedule::run_invoice_schedule(c, d).await {
                    tracing::error!(%error, "invoice schedule stopped");
                }
            });
            tasks.spawn(billing::run_payout_loop(config.clone(), db("billing")?));
            billing::build(config.clone(), db("billing")?)?.0
        }
    };
    tokio::select! {
        result = server => result.context("server failed"),
        // The gateway and quota have no background task, and an empty set's
        // `join_next` is ready at once: the pattern keeps that from ending them.
        Some(_) = tasks.join_next() => anyhow::bail!("a background task ended"),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
