//! What to build at startup: namespace names, the nodes' primary ENIs, the outside.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnetwork::{Ipv4Network, Ipv6Network};

use super::FabricError;
use crate::model::Model;

/// The outside's address unless `--outside-ip` says otherwise (TEST-NET-2, never routed).
pub const DEFAULT_OUTSIDE_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
/// The outside's IPv6 address when the VPC has IPv6: in 2001:db8:8000::/33, the documentation
/// half that VPCs never draw their /56 from (they take 2001:db8::/33), so it is never inside one.
pub const DEFAULT_OUTSIDE_IPV6: Ipv6Addr = Ipv6Addr::new(0x2001, 0x0db8, 0x8000, 0, 0, 0, 0, 0x10);
/// VPC side of the IPv6 link to the outside. Link-local addresses chosen here, not derived from
/// the veths' random MACs, so both sides know the other's next hop before the link exists.
pub const VPC_OUT_LINK6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
/// Outside side of the IPv6 link to the VPC.
pub const OUT_LINK6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);
/// The link network between the VPC and the outside (TEST-NET-1, outside any sane VPC CIDR).
pub const OUTSIDE_LINK_NET: Ipv4Network =
    match Ipv4Network::new_checked(Ipv4Addr::new(192, 0, 2, 0), 30) {
        Some(n) => n,
        None => panic!("192.0.2.0/30 is a valid network"),
    };
/// VPC-side name of the link to the outside.
pub const VPC_OUT_LINK: &str = "vpc-out";
/// Outside-side name of the link to the VPC.
pub const OUT_LINK: &str = "eth0";
/// MTU of the link to the outside: traffic leaving a VPC through an internet gateway is limited
/// to 1500 bytes, unlike traffic inside it.
pub const OUTSIDE_MTU: u32 = 1500;

/// Namespace name of node `index` (1-based).
pub fn node_netns(name: &str, index: usize) -> String {
    format!("{name}-node{index}")
}

/// Namespace name of the VPC.
pub fn vpc_netns(name: &str) -> String {
    format!("{name}-vpc")
}

/// Namespace name of the outside.
pub fn out_netns(name: &str) -> String {
    format!("{name}-out")
}

/// VPC-side link name of the ENI at `device` on node `index` (`n1d0`, `n2d1`).
pub fn eni_link(index: usize, device: u32) -> String {
    format!("n{index}d{device}")
}

/// Node-side name of the ENI at `device` (`eth0` for the primary ENI).
pub fn node_ifname(device: u32) -> String {
    format!("eth{device}")
}

/// One node's namespace and primary ENI (device 0), whose node side is configured at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlan {
    /// 1-based node number (launch order).
    pub index: usize,
    /// Namespace (`NAME-node1`).
    pub netns: String,
    /// The instance this node is.
    pub instance_id: String,
    /// VPC-side end of the primary ENI (`n1d0`).
    pub vpc_side: String,
    /// Primary ENI MAC.
    pub mac: String,
    /// Primary address with the subnet's prefix length.
    pub address: Ipv4Network,
    /// Subnet router.
    pub gateway: Ipv4Addr,
    /// The instance's primary IPv6 address (IMDS `meta-data/ipv6`), when its subnet has IPv6.
    pub ipv6: Option<Ipv6Addr>,
}

/// The outside namespace and its link to the VPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutsidePlan {
    /// Namespace (`NAME-out`).
    pub netns: String,
    /// Its one address, on its `lo`.
    pub ip: Ipv4Addr,
    /// VPC side of the link network (`192.0.2.1/30`).
    pub vpc_side: Ipv4Network,
    /// Outside side of the link network (`192.0.2.2/30`).
    pub out_side: Ipv4Network,
    /// Its IPv6 address, on its `lo`, when the VPC has IPv6.
    pub ipv6: Option<Ipv6Addr>,
}

impl OutsidePlan {
    /// The outside of simulator `name` at `ip`.
    pub fn new(name: &str, ip: Ipv4Addr) -> Self {
        let base = u32::from(OUTSIDE_LINK_NET.network());
        let side = |n: u32| {
            Ipv4Network::new(Ipv4Addr::from(base + n), OUTSIDE_LINK_NET.prefix())
                .unwrap_or(OUTSIDE_LINK_NET)
        };
        Self {
            netns: out_netns(name),
            ip,
            vpc_side: side(1),
            out_side: side(2),
            ipv6: None,
        }
    }

    /// The same outside with an IPv6 address as well.
    pub fn with_ipv6(self, ipv6: Option<Ipv6Addr>) -> Self {
        Self { ipv6, ..self }
    }
}

/// Everything to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricPlan {
    /// The VPC namespace (`NAME-vpc`).
    pub vpc_netns: String,
    /// The VPC's CIDRs, the primary first: addresses in them that nobody holds are dropped,
    /// never sent outside.
    pub vpc_cidrs: Vec<Ipv4Network>,
    /// The VPC's IPv6 /56 (dropped when nobody holds an address, like `vpc_cidrs`); `None` for
    /// an IPv4-only VPC, whose fabric carries no IPv6 at all.
    pub vpc_ipv6_cidr: Option<Ipv6Network>,
    /// The outside.
    pub outside: OutsidePlan,
    /// One entry per instance, in launch order.
    pub nodes: Vec<NodePlan>,
}

impl FabricPlan {
    /// Plans the fabric of simulator `name` from the model, with the outside at `outside_ip`.
    pub fn from_model(name: &str, m: &Model, outside_ip: Ipv4Addr) -> Result<Self, FabricError> {
        let nodes = m
            .instances()
            .iter()
            .enumerate()
            .map(|(i, inst)| {
                let eni = m
                    .eni(&inst.primary_eni)
                    .map_err(|e| FabricError::Plan(e.to_string()))?;
                let subnet = m
                    .subnet(&eni.subnet_id)
                    .map_err(|e| FabricError::Plan(e.to_string()))?;
                Ok(NodePlan {
                    index: i + 1,
                    netns: node_netns(name, i + 1),
                    instance_id: inst.id.clone(),
                    vpc_side: eni_link(i + 1, 0),
                    mac: eni.mac.clone(),
                    address: Ipv4Network::new(eni.primary_ip, subnet.cidr.prefix())
                        .map_err(|e| FabricError::Plan(e.to_string()))?,
                    gateway: subnet.router(),
                    ipv6: eni.ipv6_addresses.first().map(|a| a.value),
                })
            })
            .collect::<Result<Vec<_>, FabricError>>()?;
        Ok(Self {
            vpc_netns: vpc_netns(name),
            vpc_cidrs: m.vpc().cidrs(),
            vpc_ipv6_cidr: m.vpc().ipv6_cidr,
            outside: OutsidePlan::new(name, outside_ip)
                .with_ipv6(m.vpc().ipv6_cidr.map(|_| DEFAULT_OUTSIDE_IPV6)),
            nodes,
        })
    }

    /// Every namespace the plan creates, in creation order: VPC, outside, nodes.
    pub fn namespaces(&self) -> Vec<String> {
        [self.vpc_netns.clone(), self.outside.netns.clone()]
            .into_iter()
            .chain(self.nodes.iter().map(|n| n.netns.clone()))
            .collect()
    }

    /// Instance id -> (node number, node namespace): where an attached ENI's link goes.
    pub fn node_map(&self) -> BTreeMap<String, NodeRef> {
        self.nodes
            .iter()
            .map(|n| {
                (
                    n.instance_id.clone(),
                    NodeRef {
                        index: n.index,
                        netns: n.netns.clone(),
                    },
                )
            })
            .collect()
    }
}

/// Where an instance lives in the fabric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    /// 1-based node number.
    pub index: usize,
    /// Its namespace.
    pub netns: String,
}
