//! The built fabric: creates the namespaces, keeps the VPC's links and delivery in line with
//! the model, and removes exactly what it created (also on drop).

use std::collections::BTreeMap;

use super::plan::{
    FabricPlan, NodePlan, NodeRef, OUT_LINK, OUT_LINK6, OUTSIDE_MTU, OutsidePlan, VPC_OUT_LINK,
    VPC_OUT_LINK6,
};
use super::runner::Runner;
use super::v6::ROUTER6;
use super::wiring::{Op, Wiring, failed_line};
use super::{FabricError, IMDS_ADDR};
use crate::model::Model;
use crate::netns::netns_path;

/// Sysctls of the VPC namespace, set before any link exists so that every link created later
/// inherits the `default` values.
pub(super) const VPC_SYSCTLS: &[(&str, &str)] = &[
    ("net.ipv4.ip_forward", "1"),
    // EC2's source/destination check: the route back to a packet's source must leave through
    // the link the packet came in on, i.e. the source must be held by that ENI.
    ("net.ipv4.conf.all.rp_filter", "1"),
    ("net.ipv4.conf.default.rp_filter", "1"),
    // A node ARPing for another address of its subnet (connected route) gets the VPC's MAC.
    ("net.ipv4.conf.default.proxy_arp", "1"),
    // The VPC never tells a node to use another next hop, even when it hairpins a packet.
    ("net.ipv4.conf.all.send_redirects", "0"),
    ("net.ipv4.conf.default.send_redirects", "0"),
    // IPv4 settings are inherited from the host's namespace: a host with arp_ignore=2 would keep
    // the router address (a /32) from answering ARP.
    ("net.ipv4.conf.all.arp_ignore", "0"),
    ("net.ipv4.conf.default.arp_ignore", "0"),
];

/// IPv6 sysctls of a namespace when the VPC has IPv6. IPv6 is on in a new namespace unless the
/// host says otherwise (`devconf_inherit_init_net`), so it is switched on explicitly.
pub(super) const IPV6_ON: &[(&str, &str)] = &[
    ("net.ipv6.conf.all.disable_ipv6", "0"),
    ("net.ipv6.conf.default.disable_ipv6", "0"),
];

/// Duplicate address detection off in every namespace of the fabric, set right after the
/// namespace is made so that every link made or moved into it inherits it. EC2's links
/// finished DAD long before a pod exists, while here an address the kernel adds (a link-local
/// one on every new link, whatever the VPC's family) stays tentative for a second or two: the
/// first IPv6 packet across the box met a link that could not yet carry it.
pub(super) const DAD_OFF: &[(&str, &str)] = &[
    ("net.ipv6.conf.all.accept_dad", "0"),
    ("net.ipv6.conf.default.accept_dad", "0"),
];

/// IPv6 sysctls of the VPC and node namespaces besides [`IPV6_ON`]: both forward, as they do
/// IPv4 (a node forwards for its pods).
pub(super) const IPV6_FORWARDING: &[(&str, &str)] = &[
    ("net.ipv6.conf.all.forwarding", "1"),
    ("net.ipv6.conf.default.forwarding", "1"),
];

/// Whether `ip`'s complaint means the thing to delete does not exist.
fn already_gone(stderr: &str) -> bool {
    [
        "Cannot find device",
        "No such process",
        "No such file or directory",
        "FIB table does not exist",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// The built fabric.
#[derive(Debug)]
pub struct Fabric<R: Runner> {
    runner: R,
    created: Vec<String>,
    vpc_netns: Option<String>,
    nodes: BTreeMap<String, NodeRef>,
    applied: Wiring,
}

impl<R: Runner> Fabric<R> {
    /// Nothing built yet.
    pub fn new(runner: R) -> Self {
        Self {
            runner,
            created: Vec::new(),
            vpc_netns: None,
            nodes: BTreeMap::new(),
            applied: Wiring::default(),
        }
    }

    /// Namespaces created so far, in creation order.
    pub fn namespaces(&self) -> &[String] {
        &self.created
    }

    /// The links, routes and neighbours the VPC namespace holds as far as this fabric knows.
    pub fn wiring(&self) -> &Wiring {
        &self.applied
    }

    /// Builds the plan: the VPC, the outside, the nodes, then one link per attached ENI of
    /// `model` with its delivery, then the nodes' primary interfaces. Refuses before touching
    /// anything when a namespace already exists; on a later failure whatever was created stays
    /// recorded for [`Fabric::teardown`].
    pub fn build(&mut self, plan: &FabricPlan, model: &Model) -> Result<(), FabricError> {
        if let Some(taken) = plan
            .namespaces()
            .into_iter()
            .find(|n| netns_path(n).exists())
        {
            return Err(FabricError::NamespaceExists(taken));
        }
        let vpc = plan.vpc_netns.as_str();
        let v6 = plan.vpc_ipv6_cidr.is_some();
        self.add_netns(vpc)?;
        self.sysctls(vpc, VPC_SYSCTLS)?;
        if v6 {
            self.sysctls(vpc, &[IPV6_ON, IPV6_FORWARDING].concat())?;
        }
        self.vpc_netns = Some(vpc.to_string());
        self.nodes = plan.node_map();
        // Addresses of the VPC that nobody holds are dropped, silently as in EC2, and never
        // sent to the outside.
        let blackholes = plan
            .vpc_cidrs
            .iter()
            .map(|c| format!("route add blackhole {c}"))
            .chain(
                plan.vpc_ipv6_cidr
                    .map(|c| format!("route add blackhole {c}")),
            );
        let lines: Vec<String> = std::iter::once("link set lo up".to_string())
            .chain(blackholes)
            .collect();
        self.batch(vpc, &lines)?;
        self.build_outside(plan)?;
        for n in &plan.nodes {
            self.add_netns(&n.netns)?;
            let mut kvs = vec![("net.ipv4.ip_forward", "1")];
            if v6 {
                kvs.extend([IPV6_ON, IPV6_FORWARDING].concat());
            }
            self.sysctls(&n.netns, &kvs)?;
        }
        self.sync(model)?;
        for n in &plan.nodes {
            self.batch(&n.netns, &node_lines(n))?;
        }
        Ok(())
    }

    fn build_outside(&mut self, plan: &FabricPlan) -> Result<(), FabricError> {
        let out = &plan.outside;
        self.add_netns(&out.netns)?;
        if out.ipv6.is_some() {
            self.sysctls(&out.netns, IPV6_ON)?;
        }
        let vpc = plan.vpc_netns.as_str();
        self.batch(vpc, &vpc_out_lines(out))?;
        let mut lines = vec![
            "link set lo up".to_string(),
            format!("addr add {}/32 dev lo", out.ip),
            format!("addr add {} dev {OUT_LINK}", out.out_side),
            format!("link set {OUT_LINK} up"),
        ];
        // Back into the VPC: every CIDR, so pods in a secondary one are reachable too.
        lines.extend(
            plan.vpc_cidrs
                .iter()
                .map(|c| format!("route add {c} via {} dev {OUT_LINK}", out.vpc_side.ip())),
        );
        if let (Some(ip6), Some(cidr6)) = (out.ipv6, plan.vpc_ipv6_cidr) {
            lines.extend([
                format!("addr add {ip6}/128 dev lo nodad"),
                format!("addr add {OUT_LINK6}/64 dev {OUT_LINK} nodad"),
                format!("route add {cidr6} via {VPC_OUT_LINK6} dev {OUT_LINK}"),
            ]);
        }
        self.batch(&out.netns, &lines)
    }

    /// Brings the VPC namespace in line with `model` (links of attached ENIs, `/32` routes and
    /// permanent neighbours of their addresses; with IPv6 the routes of held IPv6 addresses and
    /// /80s), applying only the difference to what it holds, in one `ip -batch`, then the IPv6
    /// source rules in one `ip -6 -batch`. Returns the number of lines run. On failure the record keeps exactly
    /// the lines that were applied, so the next call repairs the rest. A deletion of something
    /// that is already gone (a node namespace removed behind our back takes its links along)
    /// counts as done, so such a link can still be detached.
    pub fn sync(&mut self, model: &Model) -> Result<usize, FabricError> {
        let vpc = self
            .vpc_netns
            .clone()
            .ok_or_else(|| FabricError::Plan("the fabric is not built".into()))?;
        let want = Wiring::wanted(model, &self.nodes);
        let ops = self.applied.diff(&want);
        // The diff puts the `ip -6 rule` lines last, so this is one batch, or two.
        let split = ops.iter().position(Op::is_ipv6_rule).unwrap_or(ops.len());
        let (plain, rules) = ops.split_at(split);
        self.apply(&vpc, plain, false)?;
        self.apply(&vpc, rules, true)?;
        Ok(ops.len())
    }

    /// Runs `ops` in `vpc` as one batch (`ip -6` when `v6`), recording what was applied.
    fn apply(&mut self, vpc: &str, ops: &[Op], v6: bool) -> Result<(), FabricError> {
        let mut rest = ops;
        // Each round applies at least one line or returns, so this ends.
        while !rest.is_empty() {
            let lines: Vec<String> = rest.iter().map(Op::line).collect();
            let ran = if v6 {
                self.batch6(vpc, &lines)
            } else {
                self.batch(vpc, &lines)
            };
            let e = match ran {
                Ok(()) => {
                    rest.iter().for_each(|op| op.apply(&mut self.applied));
                    break;
                }
                Err(e) => e,
            };
            let stopped = match &e {
                FabricError::Failed { stderr, .. } => failed_line(stderr)
                    .filter(|n| (1..=lines.len()).contains(n))
                    .map(|n| (n, stderr.clone())),
                _ => None,
            };
            // Without a line number `ip` did not get to run any line (no namespace, no
            // binary), so nothing was applied.
            let Some((line, stderr)) = stopped else {
                return Err(e);
            };
            rest[..line - 1]
                .iter()
                .for_each(|op| op.apply(&mut self.applied));
            let failed = &rest[line - 1];
            if failed.is_deletion() && already_gone(&stderr) {
                tracing::warn!(netns = %vpc, line = %lines[line - 1], "already gone");
                failed.apply(&mut self.applied);
                rest = &rest[line..];
                continue;
            }
            return Err(FabricError::BatchLine {
                netns: vpc.to_string(),
                line,
                text: lines[line - 1].clone(),
                stderr,
            });
        }
        Ok(())
    }

    /// `ip netns add NS` (recorded for teardown), then [`DAD_OFF`] in it; `sysctl -e`, as a
    /// kernel without IPv6 has no such keys and needs no such setting.
    pub fn add_netns(&mut self, ns: &str) -> Result<(), FabricError> {
        self.runner.run(&argv(&["ip", "netns", "add", ns]))?;
        self.created.push(ns.to_string());
        let mut cmd = argv(&["ip", "netns", "exec", ns, "sysctl", "-q", "-e", "-w"]);
        cmd.extend(DAD_OFF.iter().map(|(k, v)| format!("{k}={v}")));
        self.runner.run(&cmd)
    }

    /// `ip netns exec NS sysctl -q -w K=V ...`, in the order given.
    pub fn sysctls(&mut self, ns: &str, kvs: &[(&str, &str)]) -> Result<(), FabricError> {
        let mut cmd = argv(&["ip", "netns", "exec", ns, "sysctl", "-q", "-w"]);
        cmd.extend(kvs.iter().map(|(k, v)| format!("{k}={v}")));
        self.runner.run(&cmd)
    }

    /// `ip -n NS -batch -` with `lines`; stops at the first line that fails.
    pub fn batch(&mut self, ns: &str, lines: &[String]) -> Result<(), FabricError> {
        self.run_batch(&["ip", "-n", ns, "-batch", "-"], lines)
    }

    /// `ip -n NS -6 -batch -` with `lines`, for what takes its family from the command line.
    pub fn batch6(&mut self, ns: &str, lines: &[String]) -> Result<(), FabricError> {
        self.run_batch(&["ip", "-n", ns, "-6", "-batch", "-"], lines)
    }

    fn run_batch(&mut self, cmd: &[&str], lines: &[String]) -> Result<(), FabricError> {
        let mut input = lines.join("\n");
        input.push('\n');
        self.runner.run_with_input(&argv(cmd), &input)
    }

    /// Deletes every namespace this fabric created, newest first (nodes, outside, VPC); returns
    /// what was removed. Failures are logged and the rest still removed.
    pub fn teardown(&mut self) -> Vec<String> {
        let mut removed = Vec::new();
        while let Some(ns) = self.created.pop() {
            match self.runner.run(&argv(&["ip", "netns", "del", &ns])) {
                Ok(()) => removed.push(ns),
                Err(e) => tracing::error!(netns = %ns, error = %e, "could not remove namespace"),
            }
        }
        self.vpc_netns = None;
        self.applied = Wiring::default();
        removed
    }
}

/// The VPC side of the link to the outside, and the VPC's default routes through it.
fn vpc_out_lines(out: &OutsidePlan) -> Vec<String> {
    let mut lines = vec![
        format!(
            "link add {VPC_OUT_LINK} mtu {OUTSIDE_MTU} type veth peer name {OUT_LINK} mtu {OUTSIDE_MTU} netns {}",
            out.netns
        ),
        format!("addr add {} dev {VPC_OUT_LINK}", out.vpc_side),
        format!("link set {VPC_OUT_LINK} up"),
        format!(
            "route add default via {} dev {VPC_OUT_LINK}",
            out.out_side.ip()
        ),
    ];
    if out.ipv6.is_some() {
        // An egress-only internet gateway: IPv6 leaves with its source unchanged, no NAT.
        lines.extend([
            format!("addr add {VPC_OUT_LINK6}/64 dev {VPC_OUT_LINK} nodad"),
            format!("route add default via {OUT_LINK6} dev {VPC_OUT_LINK}"),
        ]);
    }
    lines
}

/// A node's side of its primary ENI, as the instance configures it at boot from DHCP (and on
/// EC2 DHCPv6 plus router advertisements): its addresses, up, default routes.
fn node_lines(n: &NodePlan) -> Vec<String> {
    let mut lines = vec![
        "link set lo up".to_string(),
        // Host scope: reachable from the node itself, never chosen as the source of the node's
        // own packets (on EC2 those leave from the primary address).
        format!("addr add {IMDS_ADDR}/32 dev lo scope host"),
        format!("addr add {} dev eth0", n.address),
        "link set eth0 up".to_string(),
        format!("route add default via {} dev eth0", n.gateway),
    ];
    if let Some(ip6) = n.ipv6 {
        // A /128 as DHCPv6 gives it: nothing else of the subnet is on-link, everything goes
        // through EC2's link-local router.
        lines.extend([
            format!("addr add {ip6}/128 dev eth0 nodad"),
            format!("route add default via {ROUTER6} dev eth0"),
        ]);
    }
    lines
}

impl<R: Runner> Drop for Fabric<R> {
    fn drop(&mut self) {
        if !self.created.is_empty() {
            for ns in self.teardown() {
                tracing::info!(netns = %ns, "removed namespace");
            }
        }
    }
}
