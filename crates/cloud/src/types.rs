use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnetwork::{Ipv4Network, Ipv6Network};

/// An ENI as EC2 describes it (the fields ipamd uses).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkInterface {
    /// `eni-...`.
    pub id: String,
    /// MAC, lower case.
    pub mac: String,
    /// Subnet.
    pub subnet_id: String,
    /// VPC.
    pub vpc_id: String,
    /// Description (`aws-K8S-<instance>` for ENIs we create).
    pub description: String,
    /// `available`, `in-use`, ...
    pub status: String,
    /// The ENI's primary private address.
    pub primary_ip: Option<Ipv4Addr>,
    /// Secondary private addresses (the primary excluded).
    pub secondary_ips: Vec<Ipv4Addr>,
    /// Delegated /28 prefixes.
    pub prefixes: Vec<Ipv4Network>,
    /// IPv6 addresses, the ENI's primary IPv6 (if it has one) included, in EC2's order.
    pub ipv6_addresses: Vec<Ipv6Addr>,
    /// Delegated /80 IPv6 prefixes.
    pub ipv6_prefixes: Vec<Ipv6Network>,
    /// Attachment, when attached.
    pub attachment: Option<Attachment>,
    /// Security group ids.
    pub security_groups: Vec<String>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// An ENI's attachment to an instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attachment {
    /// `eni-attach-...`.
    pub id: String,
    /// Instance; none for an ENI attached to something else (a load balancer, say).
    pub instance_id: Option<String>,
    /// Device index (0 = primary).
    pub device_index: u32,
    /// Network card.
    pub network_card_index: u32,
    /// Deleted with the instance.
    pub delete_on_termination: bool,
}

/// A subnet as EC2 describes it (the fields ipamd uses to pick one for a new ENI).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subnet {
    /// `subnet-...`.
    pub id: String,
    /// Its IPv4 CIDR.
    pub cidr: Ipv4Network,
    /// Its IPv6 /64, when one is associated (EC2 lets a subnet have at most one).
    pub ipv6_cidr: Option<Ipv6Network>,
    /// Availability zone, e.g. `us-west-2a`.
    pub availability_zone: String,
    /// VPC.
    pub vpc_id: String,
    /// Free addresses left (`AvailableIpAddressCount`).
    pub available_ips: u32,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// What a new ENI is created with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateEni {
    /// Subnet.
    pub subnet_id: String,
    /// Description (`aws-K8S-<instance id>` marks ENIs ipamd owns).
    pub description: String,
    /// Security groups (the primary ENI's).
    pub security_groups: Vec<String>,
    /// Secondary addresses it is created with.
    pub secondary_ips: u32,
    /// /28 prefixes it is created with (prefix delegation); 0 with secondary addresses.
    pub ipv4_prefixes: u32,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// The idempotency token (ClientToken, at most 64 ASCII characters). EC2 answers a request
    /// repeated with the same token and parameters with the ENI the first one created, so a
    /// retry after an answer lost on the way creates no second ENI.
    pub client_token: String,
}

/// A Describe* filter (DescribeNetworkInterfaces, DescribeSubnets): `name` is one of EC2's
/// filter names for that call (`status`, `vpc-id`, `availability-zone`, `tag-key`,
/// `tag:<key>`, `attachment.instance-id`, ...); any value matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EniFilter {
    /// Filter name.
    pub name: String,
    /// Accepted values.
    pub values: Vec<String>,
}

impl EniFilter {
    /// A filter with one value.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        EniFilter {
            name: name.into(),
            values: vec![value.into()],
        }
    }
}
