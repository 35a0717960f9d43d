//! `ipamd init`: the DaemonSet's privileged init container sets up the node's network and
//! exits, so ipamd itself needs only NET_ADMIN and NET_RAW.

use std::process::ExitCode;

use anyhow::Context;
use cloud::aws::AwsImds;
use ipamd::host::{HostNetwork, NetlinkHost};
use tracing::info;

use super::{configure, node_identity};

/// Sets up the node's network (rp_filter, SNAT, connmark, the primary ENI's MTU).
pub fn run() -> anyhow::Result<ExitCode> {
    let config = configure()?;
    info!(
        "vpc-cni init {}: setting up the node's network",
        env!("CARGO_PKG_VERSION")
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let imds = AwsImds::new();
        let identity = node_identity(&imds).await?;
        let net = ipamd::daemon::node_net(&config, &identity);
        let changes = NetlinkHost
            .setup_node(&net)
            .await
            .context("setting up the node's network")?;
        info!(?changes, "node network set up");
        Ok(ExitCode::SUCCESS)
    })
}
