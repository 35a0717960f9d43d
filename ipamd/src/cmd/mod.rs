//! ipamd's subcommands, one module each: the daemon itself ([`serve`]), the DaemonSet's
//! [`entrypoint`] around it, [`init`], [`health`] and [`doctor`].

pub mod doctor;
pub mod entrypoint;
pub mod health;
pub mod init;
pub mod serve;

use anyhow::Context;
use cloud::NodeIdentity;
use cloud::aws::AwsImds;
use cloud::retry::{RetryPolicy, retry};
use ipamd::config::Config;
use ipamd::logging;
use tracing::warn;

/// The configuration from the environment, with logging set up as it says.
fn configure() -> anyhow::Result<Config> {
    let config = Config::from_env(|k| std::env::var(k).ok()).context("invalid configuration")?;
    logging::init(&config).context("setting up logging")?;
    Ok(config)
}

/// Who the node is, from IMDS, retried while the metadata service throttles or is not
/// reachable yet (early in a node's boot).
async fn node_identity(imds: &AwsImds) -> anyhow::Result<NodeIdentity> {
    retry(
        &RetryPolicy::IMDS,
        || cloud::node_identity(imds),
        |e, pause| warn!(error = %e, ?pause, "reading instance metadata failed; retrying"),
    )
    .await
    .context("reading instance metadata")
}
