//! `stripe-double`: the Stripe test double as a process, for tests that run
//! gpumarket as a process too (the web end-to-end tests, web/e2e/run.sh).
//! It prints one line, `stripe-double listening on <base URL>`, once it
//! accepts connections, and serves until SIGINT or SIGTERM. A payment
//! confirmed through `POST /v1/payment_intents/{id}/confirm` is reported to
//! `--webhook-url` as a signed `payment_intent.succeeded` event.

use std::io::Write;

use anyhow::Context;
use clap::Parser;
use stripe_double::{Options, StripeDouble, Webhook};

#[derive(Parser)]
#[command(
    about = "A Stripe test double (not Stripe): the routes gpumarket's billing and Stripe.js call"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on; 0 picks a free one (printed).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// The secret key server-side calls must carry (`GPUMARKET_STRIPE_SECRET_KEY`).
    #[arg(long)]
    secret_key: String,
    /// The publishable key Stripe.js calls carry (`GPUMARKET_STRIPE_PUBLISHABLE_KEY`).
    #[arg(long)]
    publishable_key: Option<String>,
    /// Where confirmed payments are reported (the gateway's `/webhooks/stripe`).
    #[arg(long, requires = "webhook_secret")]
    webhook_url: Option<String>,
    /// The endpoint's signing secret; repeat it to sign with several, as
    /// during a rotation.
    #[arg(long)]
    webhook_secret: Vec<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let double = StripeDouble::start_with(Options {
        secret_key: args.secret_key,
        publishable_key: args.publishable_key,
        host: args.host,
        port: args.port,
        webhook: args.webhook_url.map(|url| Webhook {
            url,
            secrets: args.webhook_secret,
        }),
    })
    .await
    .context("starting the Stripe double")?;
    // Flushed at once: the caller waits for this line to learn the port.
    let mut out = std::io::stdout().lock();
    writeln!(out, "stripe-double listening on {}", double.url).context("stdout")?;
    out.flush().context("stdout")?;
    drop(out);

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        signal = tokio::signal::ctrl_c() => signal.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    double.stop().await;
    Ok(())
}
