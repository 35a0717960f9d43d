//! Node-level networking of the Go CNI's ipamd (reference §3.5): SNAT of pod traffic leaving
//! the VPC, the connmark that pins such connections (and NodePort ones) to the main routing
//! table, the `fwmark` rule that does the pinning, and loose reverse-path filtering.
//!
//! Why each piece exists, following a packet:
//!
//! - A pod on a secondary ENI has the rule `from <pod ip> lookup <ENI table>`, so its traffic
//!   would leave through that ENI. For destinations outside the VPC it must instead leave
//!   through the primary ENI, SNATed to the node's primary IP (only that address is mapped to
//!   a public one). nat PREROUTING sends new connections from pod veths (`eni+`) through
//!   `AWS-CONNMARK-CHAIN-0`, which RETURNs for VPC and excluded CIDRs and otherwise sets the
//!   connmark bit 0x80; the mark is copied to the packet (nat PREROUTING for the first packet,
//!   mangle PREROUTING `-i eni+` for the rest), rule `1024: fwmark 0x80/0x80 lookup main`
//!   routes it by the main table out of the primary ENI, and `AWS-SNAT-CHAIN-0` in nat
//!   POSTROUTING SNATs it unless the destination is in the VPC or excluded.
//! - NodePort traffic arrives on the primary ENI for a local address and is DNATed to a pod;
//!   mangle PREROUTING marks such connections, so the pod's replies (marked again by the
//!   `eni+` restore) take the main table back out of the primary ENI instead of the pod's ENI.
//! - With `external_snat` a NAT gateway translates, so there is no SNAT and no connmark for
//!   it; the NodePort part stays as long as `node_port_support` is on.
//!
//! Everything is idempotent and minimal: see [`apply`]. The names, comments and mark are the
//! Go CNI's, so a node migrating from it keeps its rules (and their counters) and tools that
//! look for them still find them.

mod apply;
mod config;
mod error;
mod fwmark;
mod gonft;
mod plan;
mod rules;
mod runner;
mod save;
mod sysctl;

pub use apply::{ApplyReport, apply, pending};
pub use config::{DEFAULT_CONNMARK, DEFAULT_VETH_PREFIX, NodeNetConfig, Randomize};
pub use error::{Result, SnatError};
pub use fwmark::{
    PRIO_FWMARK, RuleChanges, fwmark_rule, is_fwmark_rule, reconcile_fwmark_rule, wants_fwmark_rule,
};
pub use gonft::GO_NFT_TABLE;
pub use plan::Change;
pub use rules::{
    COMMENT_CONNMARK, COMMENT_CONNMARK_CHAIN, COMMENT_OUTBOUND, COMMENT_PRIMARY_ENI, COMMENT_SNAT,
    COMMENT_SNAT_CHAIN, COMMENT_SNAT_EXCLUSION, CONNMARK_CHAIN, ChainRules, RuleSet, SNAT_CHAIN,
    Table, TableRules, desired_rules, is_our_rule, is_own_chain,
};
pub use runner::{Backend, Runner, SystemRunner, detect_backend};
pub use sysctl::{RP_FILTER_LOOSE, ensure_sysctl};

use crate::socket::Netlink;

/// What [`setup_node_networking`] changed; all empty on a node already set up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeReport {
    /// The primary ENI's previous `rp_filter`, when it was not loose yet.
    pub rp_filter_was: Option<String>,
    /// Changes to the prio-1024 fwmark rule.
    pub fwmark_rules: RuleChanges,
    /// Changes to iptables.
    pub iptables: ApplyReport,
    /// True when the Go CNI's nftables table (`table ip aws-cni`) was found and removed.
    pub removed_go_nft_table: bool,
}

impl NodeReport {
    /// True when nothing had to change.
    pub fn is_unchanged(&self) -> bool {
        self.rp_filter_was.is_none()
            && self.fwmark_rules.added.is_empty()
            && self.fwmark_rules.removed.is_empty()
            && self.iptables.is_unchanged()
            && !self.removed_go_nft_table
    }

    /// Each change in words, for the log.
    pub fn changes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(old) = &self.rp_filter_was {
            out.push(format!("rp_filter {old} -> {RP_FILTER_LOOSE}"));
        }
        out.extend(
            self.fwmark_rules
                .removed
                .iter()
                .map(|r| format!("removed rule {r}")),
        );
        out.extend(
            self.fwmark_rules
                .added
                .iter()
                .map(|r| format!("added rule {r}")),
        );
        out.extend(self.iptables.changes.iter().map(ToString::to_string));
        if self.removed_go_nft_table {
            out.push(format!("removed nftables table ip {GO_NFT_TABLE}"));
        }
        out
    }
}

/// Sets up the node: loose `rp_filter` on the primary ENI, the fwmark rule, the iptables
/// rules ([`apply`]), and removal of the Go CNI's nftables connmark table if present. `runner` must run commands in the network namespace of `netlink` (for
/// [`SystemRunner`]: the daemon's own, the node's).
///
/// `rp_filter` is set to loose (2) unconditionally, as the Go CNI's init container does: with
/// strict filtering the kernel checks a packet's source against the route it would use to
/// reply, and here the routes differ on purpose. A NodePort packet, DNATed to a pod on a
/// secondary ENI, is checked with the pod's source-based route (out of that ENI) although it
/// came in on the primary ENI; replies to SNATed pod connections come in on the primary ENI
/// for a pod whose own route leads out of another. Loose mode only asks that some route leads
/// back, which keeps the spoofing protection for sources that have no route at all.
pub fn setup_node_networking(
    runner: &(impl Runner + ?Sized),
    netlink: &Netlink,
    backend: Backend,
    cfg: &NodeNetConfig,
) -> Result<NodeReport> {
    cfg.validate()?;
    let rp_filter_was = sysctl::set_rp_filter_loose(netlink.netns_fd(), &cfg.primary_if)?;
    let fwmark_rules = reconcile_fwmark_rule(netlink, cfg)?;
    let iptables = apply(runner, backend, cfg)?;
    let removed_go_nft_table = gonft::remove_go_nft_table(runner)?;
    Ok(NodeReport {
        rp_filter_was,
        fwmark_rules,
        iptables,
        removed_go_nft_table,
    })
}
