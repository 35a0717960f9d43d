//! Node-wide network setup on the real node: the primary ENI's link MTU, then SNAT, connmark,
//! the prio-1024 fwmark rule and rp_filter (netops::snat), all idempotent.

use netops::snat::{self, NodeNetConfig, SystemRunner};
use netops::{Netlink, parse_mac};
use tracing::info;

use crate::host::{HostError, NodeNet};

/// Sets up the node's network. Returns what changed (empty when all was in place).
pub fn setup(net: &NodeNet) -> Result<Vec<String>, HostError> {
    let nl = Netlink::current()?;
    let mac =
        parse_mac(&net.primary_mac).ok_or_else(|| HostError::BadMac(net.primary_mac.clone()))?;
    let link = nl
        .link_by_mac(&mac)?
        .ok_or_else(|| HostError::LinkNotFound(net.primary_mac.clone()))?;
    let mut changes = Vec::new();
    if link.mtu != Some(net.mtu) {
        nl.set_link_mtu(link.index, net.mtu)?;
        changes.push(format!("{} mtu {}", link.name, net.mtu));
    }

    let runner = SystemRunner;
    let backend = snat::detect_backend(&runner)?;
    info!(?backend, primary_if = %link.name, "iptables backend");
    let cfg = NodeNetConfig {
        primary_if: link.name,
        ..net.snat.clone()
    };
    let report = snat::setup_node_networking(&runner, &nl, backend, &cfg)?;
    changes.extend(report.changes());
    Ok(changes)
}
