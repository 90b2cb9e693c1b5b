//! One place that sets up tracing: JSON lines in production, compact text
//! locally, and `RUST_LOG` to choose what is shown.

use tracing_subscriber::EnvFilter;

pub fn init(format: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,actix_server=warn,lapin=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // A second init (tests start services more than once) is not an error.
    let _ = if format == "json" {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.compact().try_init()
    };
}
