//! The built fabric: creates the namespaces, keeps the VPC's links and delivery in line with
//! the model, and removes exactly what it created (also on drop).

use std::collections::BTreeMap;

use super::plan::{FabricPlan, NodeRef, OUT_LINK, OUTSIDE_MTU, VPC_OUT_LINK};
use super::runner::Runner;
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
        self.add_netns(vpc)?;
        self.sysctls(vpc, VPC_SYSCTLS)?;
        self.vpc_netns = Some(vpc.to_string());
        self.nodes = plan.node_map();
        // Addresses of the VPC that nobody holds are dropped, silently as in EC2, and never
        // sent to the outside.
        let blackholes = plan
            .vpc_cidrs
            .iter()
            .map(|c| format!("route add blackhole {c}"));
        let lines: Vec<String> = std::iter::once("link set lo up".to_string())
            .chain(blackholes)
            .collect();
        self.batch(vpc, &lines)?;
        self.build_outside(plan)?;
        for n in &plan.nodes {
            self.add_netns(&n.netns)?;
            self.sysctls(&n.netns, &[("net.ipv4.ip_forward", "1")])?;
        }
        self.sync(model)?;
        for n in &plan.nodes {
            let lines = [
                "link set lo up".to_string(),
                // Host scope: reachable from the node itself, never chosen as the source of the
                // node's own packets (on EC2 those leave from the primary address).
                format!("addr add {IMDS_ADDR}/32 dev lo scope host"),
                format!("addr add {} dev eth0", n.address),
                "link set eth0 up".to_string(),
                format!("route add default via {} dev eth0", n.gateway),
            ];
            self.batch(&n.netns, &lines)?;
        }
        Ok(())
    }

    fn build_outside(&mut self, plan: &FabricPlan) -> Result<(), FabricError> {
        let out = &plan.outside;
        self.add_netns(&out.netns)?;
        let vpc = plan.vpc_netns.as_str();
        self.batch(
            vpc,
            &[
                format!(
                    "link add {VPC_OUT_LINK} mtu {OUTSIDE_MTU} type veth peer name {OUT_LINK} mtu {OUTSIDE_MTU} netns {}",
                    out.netns
                ),
                format!("addr add {} dev {VPC_OUT_LINK}", out.vpc_side),
                format!("link set {VPC_OUT_LINK} up"),
                format!("route add default via {} dev {VPC_OUT_LINK}", out.out_side.ip()),
            ],
        )?;
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
        self.batch(&out.netns, &lines)
    }

    /// Brings the VPC namespace in line with `model` (links of attached ENIs, `/32` routes and
    /// permanent neighbours of their addresses), applying only the difference to what it holds,
    /// in one `ip -batch`. Returns the number of lines run. On failure the record keeps exactly
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
        let mut rest = ops.as_slice();
        // Each round applies at least one line or returns, so this ends.
        while !rest.is_empty() {
            let lines: Vec<String> = rest.iter().map(Op::line).collect();
            let e = match self.batch(&vpc, &lines) {
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
                netns: vpc,
                line,
                text: lines[line - 1].clone(),
                stderr,
            });
        }
        Ok(ops.len())
    }

    /// `ip netns add NS` (recorded for teardown).
    pub fn add_netns(&mut self, ns: &str) -> Result<(), FabricError> {
        self.runner.run(&argv(&["ip", "netns", "add", ns]))?;
        self.created.push(ns.to_string());
        Ok(())
    }

    /// `ip netns exec NS sysctl -q -w K=V ...`, in the order given.
    pub fn sysctls(&mut self, ns: &str, kvs: &[(&str, &str)]) -> Result<(), FabricError> {
        let mut cmd = argv(&["ip", "netns", "exec", ns, "sysctl", "-q", "-w"]);
        cmd.extend(kvs.iter().map(|(k, v)| format!("{k}={v}")));
        self.runner.run(&cmd)
    }

    /// `ip -n NS -batch -` with `lines`; stops at the first line that fails.
    pub fn batch(&mut self, ns: &str, lines: &[String]) -> Result<(), FabricError> {
        let mut input = lines.join("\n");
        input.push('\n');
        self.runner
            .run_with_input(&argv(&["ip", "-n", ns, "-batch", "-"]), &input)
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

impl<R: Runner> Drop for Fabric<R> {
    fn drop(&mut self) {
        if !self.created.is_empty() {
            for ns in self.teardown() {
                tracing::info!(netns = %ns, "removed namespace");
            }
        }
    }
}
