//! Node-wide network setup on the real node: the primary ENI's link MTU, then SNAT, connmark,
//! the prio-1024 fwmark rule and rp_filter (netops::snat), and IPv6 forwarding in IPv6 mode
//! (IPv4 forwarding too with IPv4 egress), all idempotent.

use netops::snat::{self, NodeNetConfig, SystemRunner};
use netops::{Netlink, parse_mac};
use tracing::info;

use crate::host_error::HostError;

/// Node-wide settings: the primary ENI's link and the SNAT and connmark rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeNet {
    /// The primary ENI's MAC (its link is found by it).
    pub primary_mac: String,
    /// `AWS_VPC_ENI_MTU`, applied to the primary ENI's link.
    pub mtu: u32,
    /// Pods get IPv6 addresses: the node forwards IPv6 and keeps its router advertisements.
    pub ipv6: bool,
    /// The SNAT, connmark and fwmark settings. Their `primary_if` is left empty here and set
    /// to the name of the link found by `primary_mac` when the rules are applied.
    pub snat: NodeNetConfig,
}

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

    if net.ipv6 {
        changes.extend(ipv6_sysctls(&link.name)?);
    }
    if net.snat.v4_egress.is_some() {
        // IPv6 pods' IPv4 egress is forwarded from their veths to the primary ENI, as
        // aws-node's egress plugin turns it on.
        changes.extend(ensure_sysctls(&[("net/ipv4/ip_forward".to_string(), "1")])?);
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

/// What an IPv6 node needs, as aws-node's init container sets it: IPv6 on, forwarding between
/// the pods' veths and the primary ENI, and router advertisements still accepted on the primary
/// ENI although forwarding is on (`accept_ra=2`), so the node keeps its default route.
fn ipv6_sysctls(primary_if: &str) -> Result<Vec<String>, HostError> {
    ensure_sysctls(&[
        ("net/ipv6/conf/all/disable_ipv6".to_string(), "0"),
        ("net/ipv6/conf/all/forwarding".to_string(), "1"),
        (format!("net/ipv6/conf/{primary_if}/accept_ra"), "2"),
    ])
}

/// Writes each `/proc/sys` setting that differs; returns what changed.
fn ensure_sysctls(settings: &[(String, &str)]) -> Result<Vec<String>, HostError> {
    let mut changes = Vec::new();
    for (key, value) in settings {
        let value = *value;
        // The DaemonSet's ipamd sees /proc/sys read-only; `ipamd init` has set these already.
        if snat::ensure_sysctl(&format!("/proc/sys/{key}"), value)?.is_some() {
            changes.push(format!("{} = {value}", key.replace('/', ".")));
        }
    }
    Ok(changes)
}
