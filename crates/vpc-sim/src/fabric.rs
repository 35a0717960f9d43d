//! VPC-in-a-box: namespaces, bridges and veths built from the model with `ip` and `sysctl`.
//!
//! One function per operation so that later features (hot-plugging a secondary ENI into a node on
//! Attach, removing it on Detach) reuse them. Commands go through a [`Runner`] so the sequence can
//! be checked without root. Only namespaces this process created are ever deleted.

use std::net::Ipv4Addr;
use std::process::Command;

use ipnetwork::Ipv4Network;
use thiserror::Error;

use crate::model::Model;
use crate::netns::netns_path;

/// MTU of every ENI, as on EC2 (jumbo frames inside a VPC).
pub const ENI_MTU: u32 = 9001;
/// The IMDS address, put on `lo` in each node namespace.
pub const IMDS_ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// A fabric operation that failed.
#[derive(Debug, Error)]
pub enum FabricError {
    /// The namespace is already there: another simulator, or leftovers of a crashed one.
    #[error(
        "network namespace {0} already exists (another vpc-sim with this name, or leftovers: `ip netns del {0}`)"
    )]
    NamespaceExists(String),
    /// A command could not be started.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Exit status.
        status: String,
        /// What it printed.
        stderr: String,
    },
    /// The model lacks something the plan needs.
    #[error("cannot plan the fabric: {0}")]
    Plan(String),
}

/// Runs one command (argv).
pub trait Runner {
    /// Runs `argv`; an error carries the command line and its stderr.
    fn run(&mut self, argv: &[String]) -> Result<(), FabricError>;
}

/// Runs commands for real.
#[derive(Debug, Default)]
pub struct CommandRunner;

impl Runner for CommandRunner {
    fn run(&mut self, argv: &[String]) -> Result<(), FabricError> {
        let command = argv.join(" ");
        let (prog, args) = argv.split_first().ok_or_else(|| FabricError::Spawn {
            command: command.clone(),
            source: std::io::Error::other("empty command"),
        })?;
        tracing::debug!(%command, "fabric");
        let out = Command::new(prog)
            .args(args)
            .output()
            .map_err(|source| FabricError::Spawn {
                command: command.clone(),
                source,
            })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(FabricError::Failed {
                command,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }
}

/// One subnet's bridge in the VPC namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgePlan {
    /// Interface name (`br0`, `br1`, ...).
    pub name: String,
    /// Router address with the subnet's prefix length (`10.0.0.1/24`).
    pub router: Ipv4Network,
}

/// One node's namespace and primary ENI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlan {
    /// Namespace (`NAME-node1`).
    pub netns: String,
    /// VPC-side veth end (`n1d0`: node 1, device 0).
    pub vpc_side: String,
    /// Bridge of the ENI's subnet.
    pub bridge: String,
    /// ENI MAC.
    pub mac: String,
    /// ENI primary address with the subnet's prefix length.
    pub address: Ipv4Network,
    /// Subnet router.
    pub gateway: Ipv4Addr,
}

/// Everything to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricPlan {
    /// The VPC namespace (`NAME-vpc`).
    pub vpc_netns: String,
    /// One bridge per subnet.
    pub bridges: Vec<BridgePlan>,
    /// One entry per instance, in launch order.
    pub nodes: Vec<NodePlan>,
}

/// Namespace name of node `index` (1-based).
pub fn node_netns(name: &str, index: usize) -> String {
    format!("{name}-node{index}")
}

/// Namespace name of the VPC.
pub fn vpc_netns(name: &str) -> String {
    format!("{name}-vpc")
}

impl FabricPlan {
    /// Plans the fabric of simulator `name` from the model.
    pub fn from_model(name: &str, m: &Model) -> Result<Self, FabricError> {
        let subnets = m.subnets();
        let bridges = subnets
            .iter()
            .enumerate()
            .map(|(i, s)| {
                Ipv4Network::new(s.router(), s.cidr.prefix())
                    .map(|router| BridgePlan {
                        name: format!("br{i}"),
                        router,
                    })
                    .map_err(|e| FabricError::Plan(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let nodes = m
            .instances()
            .iter()
            .enumerate()
            .map(|(i, inst)| {
                let eni = m
                    .eni(&inst.primary_eni)
                    .map_err(|e| FabricError::Plan(e.to_string()))?;
                let pos = subnets
                    .iter()
                    .position(|s| s.id == eni.subnet_id)
                    .ok_or_else(|| FabricError::Plan(format!("no subnet {}", eni.subnet_id)))?;
                let subnet = subnets[pos];
                Ok(NodePlan {
                    netns: node_netns(name, i + 1),
                    vpc_side: format!("n{}d0", i + 1),
                    bridge: bridges[pos].name.clone(),
                    mac: eni.mac.clone(),
                    address: Ipv4Network::new(eni.primary_ip, subnet.cidr.prefix())
                        .map_err(|e| FabricError::Plan(e.to_string()))?,
                    gateway: subnet.router(),
                })
            })
            .collect::<Result<Vec<_>, FabricError>>()?;
        Ok(Self {
            vpc_netns: vpc_netns(name),
            bridges,
            nodes,
        })
    }

    /// Every namespace the plan creates, VPC first.
    pub fn namespaces(&self) -> Vec<String> {
        std::iter::once(self.vpc_netns.clone())
            .chain(self.nodes.iter().map(|n| n.netns.clone()))
            .collect()
    }
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// The built fabric: remembers what it created and removes exactly that (also on drop).
#[derive(Debug)]
pub struct Fabric<R: Runner> {
    runner: R,
    created: Vec<String>,
}

impl<R: Runner> Fabric<R> {
    /// Nothing built yet.
    pub fn new(runner: R) -> Self {
        Self {
            runner,
            created: Vec::new(),
        }
    }

    /// Namespaces created so far, in creation order.
    pub fn namespaces(&self) -> &[String] {
        &self.created
    }

    /// Builds the whole plan. Refuses before touching anything when a namespace already exists;
    /// on a later failure whatever was created stays recorded for [`Fabric::teardown`].
    pub fn build(&mut self, plan: &FabricPlan) -> Result<(), FabricError> {
        if let Some(taken) = plan
            .namespaces()
            .into_iter()
            .find(|n| netns_path(n).exists())
        {
            return Err(FabricError::NamespaceExists(taken));
        }
        let vpc = plan.vpc_netns.as_str();
        self.add_netns(vpc)?;
        self.link_up(vpc, "lo")?;
        self.sysctl(vpc, "net.ipv4.ip_forward", "1")?;
        for b in &plan.bridges {
            self.add_bridge(vpc, &b.name)?;
            self.add_addr(vpc, b.router, &b.name)?;
            self.link_up(vpc, &b.name)?;
        }
        for n in &plan.nodes {
            self.add_node(vpc, n)?;
        }
        Ok(())
    }

    fn add_node(&mut self, vpc: &str, n: &NodePlan) -> Result<(), FabricError> {
        let ns = n.netns.as_str();
        self.add_netns(ns)?;
        self.link_up(ns, "lo")?;
        // Host scope: reachable from the node itself, never chosen as the source of the node's
        // own packets (on EC2 those leave from the primary address).
        let imds = format!("{IMDS_ADDR}/32");
        self.runner.run(&argv(&[
            "ip", "-n", ns, "addr", "add", &imds, "dev", "lo", "scope", "host",
        ]))?;
        self.add_veth_into(vpc, &n.vpc_side, "eth0", ns)?;
        self.set_mtu(vpc, &n.vpc_side, ENI_MTU)?;
        self.set_master(vpc, &n.vpc_side, &n.bridge)?;
        self.link_up(vpc, &n.vpc_side)?;
        self.set_mac(ns, "eth0", &n.mac)?;
        self.set_mtu(ns, "eth0", ENI_MTU)?;
        self.add_addr(ns, n.address, "eth0")?;
        self.link_up(ns, "eth0")?;
        self.add_default_route(ns, n.gateway)?;
        self.sysctl(ns, "net.ipv4.ip_forward", "1")
    }

    /// `ip netns add NS` (recorded for teardown).
    pub fn add_netns(&mut self, ns: &str) -> Result<(), FabricError> {
        self.runner.run(&argv(&["ip", "netns", "add", ns]))?;
        self.created.push(ns.to_string());
        Ok(())
    }

    /// `ip -n NS link set DEV up`.
    pub fn link_up(&mut self, ns: &str, dev: &str) -> Result<(), FabricError> {
        self.runner
            .run(&argv(&["ip", "-n", ns, "link", "set", dev, "up"]))
    }

    /// `ip -n NS link add NAME type bridge`.
    pub fn add_bridge(&mut self, ns: &str, name: &str) -> Result<(), FabricError> {
        self.runner.run(&argv(&[
            "ip", "-n", ns, "link", "add", name, "type", "bridge",
        ]))
    }

    /// `ip -n NS addr add CIDR dev DEV`.
    pub fn add_addr(&mut self, ns: &str, cidr: Ipv4Network, dev: &str) -> Result<(), FabricError> {
        let cidr = cidr.to_string();
        self.runner
            .run(&argv(&["ip", "-n", ns, "addr", "add", &cidr, "dev", dev]))
    }

    /// A veth pair created in `ns` whose `peer` end is placed straight into `peer_ns`.
    pub fn add_veth_into(
        &mut self,
        ns: &str,
        name: &str,
        peer: &str,
        peer_ns: &str,
    ) -> Result<(), FabricError> {
        self.runner.run(&argv(&[
            "ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name", peer, "netns",
            peer_ns,
        ]))
    }

    /// `ip -n NS link set DEV master BRIDGE`.
    pub fn set_master(&mut self, ns: &str, dev: &str, bridge: &str) -> Result<(), FabricError> {
        self.runner.run(&argv(&[
            "ip", "-n", ns, "link", "set", dev, "master", bridge,
        ]))
    }

    /// `ip -n NS link set DEV address MAC`.
    pub fn set_mac(&mut self, ns: &str, dev: &str, mac: &str) -> Result<(), FabricError> {
        self.runner
            .run(&argv(&["ip", "-n", ns, "link", "set", dev, "address", mac]))
    }

    /// `ip -n NS link set DEV mtu MTU`.
    pub fn set_mtu(&mut self, ns: &str, dev: &str, mtu: u32) -> Result<(), FabricError> {
        let mtu = mtu.to_string();
        self.runner
            .run(&argv(&["ip", "-n", ns, "link", "set", dev, "mtu", &mtu]))
    }

    /// `ip -n NS route add default via GW`.
    pub fn add_default_route(&mut self, ns: &str, gw: Ipv4Addr) -> Result<(), FabricError> {
        let gw = gw.to_string();
        self.runner.run(&argv(&[
            "ip", "-n", ns, "route", "add", "default", "via", &gw,
        ]))
    }

    /// `ip netns exec NS sysctl -w KEY=VALUE`.
    pub fn sysctl(&mut self, ns: &str, key: &str, value: &str) -> Result<(), FabricError> {
        let kv = format!("{key}={value}");
        self.runner.run(&argv(&[
            "ip", "netns", "exec", ns, "sysctl", "-q", "-w", &kv,
        ]))
    }

    /// Deletes every namespace this fabric created, newest first; returns what was removed.
    /// Failures are logged and the rest still removed.
    pub fn teardown(&mut self) -> Vec<String> {
        let mut removed = Vec::new();
        while let Some(ns) = self.created.pop() {
            match self.runner.run(&argv(&["ip", "netns", "del", &ns])) {
                Ok(()) => removed.push(ns),
                Err(e) => tracing::error!(netns = %ns, error = %e, "could not remove namespace"),
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Topology;
    use crate::rand::Rng;

    /// Records commands; fails the command that contains `fail_on`.
    #[derive(Default)]
    struct Recorder {
        log: std::rc::Rc<std::cell::RefCell<Vec<String>>>,
        fail_on: Option<String>,
    }

    impl Runner for Recorder {
        fn run(&mut self, argv: &[String]) -> Result<(), FabricError> {
            let line = argv.join(" ");
            self.log.borrow_mut().push(line.clone());
            match &self.fail_on {
                Some(f) if line.contains(f.as_str()) => Err(FabricError::Failed {
                    command: line,
                    status: "exit status: 2".into(),
                    stderr: "boom".into(),
                }),
                _ => Ok(()),
            }
        }
    }

    fn model() -> Model {
        let t = Topology {
            vpc_cidr: "10.0.0.0/16".parse().unwrap(),
            region: "us-west-2".into(),
            subnets: vec![
                "10.0.0.0/24".parse().unwrap(),
                "10.0.1.0/24".parse().unwrap(),
            ],
            nodes: 2,
            instance_type: "t3.medium".into(),
            extra_types: vec![],
        };
        Model::build(&t, Rng::seeded(9), 0).unwrap()
    }

    const NAME: &str = "vpcsim-unit-test-nonexistent";

    #[test]
    fn plan_follows_the_model() {
        let m = model();
        let plan = FabricPlan::from_model(NAME, &m).unwrap();
        assert_eq!(plan.vpc_netns, format!("{NAME}-vpc"));
        assert_eq!(plan.bridges[0].router.to_string(), "10.0.0.1/24");
        assert_eq!(plan.bridges[1].router.to_string(), "10.0.1.1/24");
        let n1 = &plan.nodes[0];
        let inst = m.instances()[0];
        let eni = m.eni(&inst.primary_eni).unwrap();
        assert_eq!(n1.netns, format!("{NAME}-node1"));
        assert_eq!((n1.vpc_side.as_str(), n1.bridge.as_str()), ("n1d0", "br0"));
        assert_eq!(n1.mac, eni.mac);
        assert_eq!(n1.address.ip(), eni.primary_ip);
        assert_eq!(n1.address.prefix(), 24);
        assert_eq!(n1.gateway.to_string(), "10.0.0.1");
        assert_eq!(plan.namespaces().len(), 3);
    }

    #[test]
    fn build_runs_the_expected_commands_and_teardown_reverses() {
        let plan = FabricPlan::from_model(NAME, &model()).unwrap();
        let rec = Recorder::default();
        let log = rec.log.clone();
        let mut f = Fabric::new(rec);
        f.build(&plan).unwrap();
        let lines = log.borrow().clone();
        let vpc = format!("{NAME}-vpc");
        let n1 = format!("{NAME}-node1");
        assert_eq!(lines[0], format!("ip netns add {vpc}"));
        let pos = |needle: &str| {
            lines
                .iter()
                .position(|l| l == needle)
                .unwrap_or_else(|| panic!("missing {needle}"))
        };
        let veth = pos(&format!(
            "ip -n {vpc} link add n1d0 type veth peer name eth0 netns {n1}"
        ));
        assert!(pos(&format!("ip netns add {n1}")) < veth);
        assert!(
            veth < pos(&format!(
                "ip -n {n1} link set eth0 address {}",
                plan.nodes[0].mac
            ))
        );
        pos(&format!(
            "ip -n {n1} addr add 169.254.169.254/32 dev lo scope host"
        ));
        pos(&format!("ip -n {n1} link set eth0 mtu 9001"));
        pos(&format!("ip -n {n1} route add default via 10.0.0.1"));
        pos(&format!(
            "ip netns exec {n1} sysctl -q -w net.ipv4.ip_forward=1"
        ));
        pos(&format!("ip -n {vpc} link set n1d0 master br0"));
        assert!(
            lines
                .iter()
                .all(|l| l.starts_with(&format!("ip netns add {NAME}")) || l.contains(NAME)),
            "every command targets one of our namespaces"
        );

        log.borrow_mut().clear();
        let removed = f.teardown();
        assert_eq!(
            removed,
            vec![format!("{NAME}-node2"), n1.clone(), vpc.clone()]
        );
        assert_eq!(log.borrow()[0], format!("ip netns del {NAME}-node2"));
    }

    #[test]
    fn a_failure_midway_leaves_only_what_was_created_for_teardown() {
        let plan = FabricPlan::from_model(NAME, &model()).unwrap();
        let rec = Recorder {
            fail_on: Some(format!("ip netns add {NAME}-node2")),
            ..Default::default()
        };
        let log = rec.log.clone();
        {
            let mut f = Fabric::new(rec);
            let e = f.build(&plan).unwrap_err();
            assert!(e.to_string().contains("boom"), "{e}");
            assert_eq!(
                f.namespaces(),
                &[format!("{NAME}-vpc"), format!("{NAME}-node1")]
            );
        } // dropped: tears down
        let dels: Vec<String> = log
            .borrow()
            .iter()
            .filter(|l| l.starts_with("ip netns del"))
            .cloned()
            .collect();
        assert_eq!(
            dels,
            vec![
                format!("ip netns del {NAME}-node1"),
                format!("ip netns del {NAME}-vpc")
            ]
        );
    }
}
