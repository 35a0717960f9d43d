//! The resources the model holds.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnetwork::{Ipv4Network, Ipv6Network};
use serde::Serialize;

use super::alloc::AddressSpace;
use super::alloc6::Ipv6Space;

/// Key -> value tags of a resource.
pub type Tags = BTreeMap<String, String>;

/// The VPC (one per simulator).
#[derive(Debug, Clone, Serialize)]
pub struct Vpc {
    /// `vpc-...`.
    pub id: String,
    /// Its primary IPv4 CIDR.
    pub cidr: Ipv4Network,
    /// CIDRs associated after the primary one, in order (e.g. `100.64.0.0/16` for pods).
    pub secondary_cidrs: Vec<Ipv4Network>,
    /// Region name, e.g. `us-west-2`.
    pub region: String,
    /// The default availability zone, e.g. `us-west-2a`: that of a subnet given none.
    pub az: String,
    /// Account that owns everything.
    pub owner_id: String,
    /// The VPC's default security group (`sg-...`), which an ENI created without groups gets.
    pub default_security_group: String,
    /// Tags.
    pub tags: Tags,
    /// Its IPv6 /56, when it has one (left out of the JSON when not, so an IPv4 VPC reads as it
    /// always did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_cidr: Option<Ipv6Network>,
}

impl Vpc {
    /// Every IPv4 CIDR of the VPC, the primary first.
    pub fn cidrs(&self) -> Vec<Ipv4Network> {
        std::iter::once(self.cidr)
            .chain(self.secondary_cidrs.iter().copied())
            .collect()
    }
}

/// A security group of the VPC. Only its identity is modelled: the fabric filters no traffic.
#[derive(Debug, Clone, Serialize)]
pub struct SecurityGroup {
    /// `sg-...`.
    pub id: String,
    /// Unique in the VPC; `default` for the VPC's default group.
    pub name: String,
    /// Free text.
    pub description: String,
    /// VPC.
    pub vpc_id: String,
    /// Tags.
    pub tags: Tags,
}

/// A subnet and its address bookkeeping.
#[derive(Debug, Clone, Serialize)]
pub struct Subnet {
    /// `subnet-...`.
    pub id: String,
    /// Its IPv4 CIDR, inside the VPC's.
    pub cidr: Ipv4Network,
    /// Availability zone.
    pub az: String,
    /// Tags.
    pub tags: Tags,
    /// Creation order, so listings are stable and "the first subnet" means something.
    pub index: usize,
    #[serde(skip)]
    pub(crate) space: AddressSpace,
    /// Its IPv6 /64, when one is associated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<SubnetIpv6>,
}

/// A subnet's IPv6 CIDR association and its address bookkeeping.
#[derive(Debug, Clone, Serialize)]
pub struct SubnetIpv6 {
    /// The /64.
    pub cidr: Ipv6Network,
    /// `subnet-cidr-assoc-...`.
    pub association_id: String,
    #[serde(skip)]
    pub(crate) space: Ipv6Space,
}

impl Subnet {
    /// Free addresses left, as DescribeSubnets reports them.
    pub fn available_ip_address_count(&self) -> u32 {
        self.space.available()
    }

    /// The router address (.1), the default gateway of everything in the subnet.
    pub fn router(&self) -> Ipv4Addr {
        self.space.router()
    }

    /// Its IPv6 /64, if any.
    pub fn ipv6_cidr(&self) -> Option<Ipv6Network> {
        self.ipv6.as_ref().map(|v| v.cidr)
    }

    /// Whether a new ENI here gets an IPv6 address without asking: EC2's subnet attribute
    /// AssignIpv6AddressOnCreation, which the simulator sets on every subnet with an IPv6 CIDR
    /// (EKS requires it of an IPv6 cluster's subnets).
    pub fn assign_ipv6_on_creation(&self) -> bool {
        self.ipv6.is_some()
    }
}

/// A running instance.
#[derive(Debug, Clone, Serialize)]
pub struct Instance {
    /// `i-...`.
    pub id: String,
    /// Launch order, so listings are stable and node N means something (instances launched
    /// together share one launch time).
    pub index: usize,
    /// e.g. `t3.medium`.
    pub instance_type: String,
    /// Subnet of the primary ENI.
    pub subnet_id: String,
    /// Availability zone: that of its subnet.
    pub az: String,
    /// Its primary ENI (device 0).
    pub primary_eni: String,
    /// `ami-...`.
    pub image_id: String,
    /// Launch time, ms since the epoch.
    pub launched_ms: u64,
    /// Tags.
    pub tags: Tags,
}

/// ENI status as EC2 spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EniStatus {
    /// Not attached.
    Available,
    /// Attached to an instance.
    InUse,
}

impl EniStatus {
    /// EC2's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Available => "available",
            Self::InUse => "in-use",
        }
    }
}

/// A value with the time EC2 made it so (what the IMDS lag is measured from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stamped<T> {
    /// The value.
    pub value: T,
    /// When it was assigned, ms since the epoch.
    pub at_ms: u64,
}

/// An ENI's attachment to an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attachment {
    /// `eni-attach-...`.
    pub id: String,
    /// The instance.
    pub instance_id: String,
    /// Device index (0 = primary).
    pub device_index: u32,
    /// Network card (always 0 for now).
    pub network_card_index: u32,
    /// Delete the ENI when the instance terminates.
    pub delete_on_termination: bool,
    /// When it was attached, ms since the epoch.
    pub attached_ms: u64,
}

impl Attachment {
    /// Attachment status as EC2 spells it (attach and detach complete at once here).
    pub fn status(&self) -> &'static str {
        "attached"
    }
}

/// An elastic network interface.
#[derive(Debug, Clone, Serialize)]
pub struct Eni {
    /// `eni-...`.
    pub id: String,
    /// `02:..` MAC.
    pub mac: String,
    /// Subnet.
    pub subnet_id: String,
    /// VPC.
    pub vpc_id: String,
    /// Availability zone.
    pub az: String,
    /// Free text.
    pub description: String,
    /// available / in-use.
    pub status: EniStatus,
    /// Tags.
    pub tags: Tags,
    /// Primary private address.
    pub primary_ip: Ipv4Addr,
    /// Secondary private addresses, in assignment order.
    pub secondary_ips: Vec<Stamped<Ipv4Addr>>,
    /// Delegated /28 prefixes, in assignment order.
    pub prefixes: Vec<Stamped<Ipv4Network>>,
    /// IPv6 addresses, in assignment order (none of them is EC2's "primary IPv6").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ipv6_addresses: Vec<Stamped<Ipv6Addr>>,
    /// Delegated IPv6 /80 prefixes, in assignment order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ipv6_prefixes: Vec<Stamped<Ipv6Network>>,
    /// Attachment, when attached.
    pub attachment: Option<Attachment>,
    /// Security group ids.
    pub security_groups: Vec<String>,
    /// Creation time, ms since the epoch.
    pub created_ms: u64,
}

impl Eni {
    /// IPv4 slots in use: the primary, each secondary, and one per prefix (EC2 counts a prefix as
    /// one address against the per-ENI limit).
    pub fn ipv4_slots(&self) -> u32 {
        1 + self.secondary_ips.len() as u32 + self.prefixes.len() as u32
    }

    /// IPv6 slots in use: each address and each prefix (a prefix counts as one address against
    /// the per-ENI IPv6 limit, as an IPv4 prefix does against the IPv4 one).
    pub fn ipv6_slots(&self) -> u32 {
        self.ipv6_addresses.len() as u32 + self.ipv6_prefixes.len() as u32
    }

    /// Every private address: primary first, then secondaries.
    pub fn private_ips(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        std::iter::once(self.primary_ip).chain(self.secondary_ips.iter().map(|s| s.value))
    }
}
