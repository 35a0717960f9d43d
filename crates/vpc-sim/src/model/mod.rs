//! The simulated VPC: the single source of truth behind the EC2 API, IMDS and the fabric.
//!
//! Pure: no I/O, no clock. Operations that change something take `now_ms` so every change is
//! stamped, which is what lets IMDS show a lagged view without anyone sleeping.

mod addresses;
mod addresses6;
mod alloc;
mod alloc6;
mod attach;
mod enis;
mod error;
mod fragment;
mod groups;
mod ids;
mod tags;
mod types;
mod view;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests6;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use cloud::limits::{InstanceLimits, InstanceTable};
use ipnetwork::{Ipv4Network, Ipv6Network};
use serde::Serialize;

pub use addresses::{AssignRequest, Assigned};
pub use addresses6::{Assign6Request, Assigned6, ipv6_per_eni};
pub use alloc::{AddressSpace, PREFIX_LEN, TakeError};
pub use alloc6::{Ipv6Space, PREFIX_V6_LEN, SUBNET_V6_LEN};
pub use enis::{CreateEni, EniChange};
pub use error::ModelError;
pub use fragment::{BadFragment, Fragment, FragmentReport};
pub use ids::{IdGen, well_formed};
pub use tags::TagFilter;
pub use types::{
    Attachment, Eni, EniStatus, Instance, SecurityGroup, Stamped, Subnet, SubnetIpv6, Tags, Vpc,
};
pub use view::{InstanceView, InterfaceView};

use crate::rand::Rng;

/// Account id the simulator reports as the owner of everything (AWS's documentation example).
pub const ACCOUNT_ID: &str = "111122223333";
/// The largest IPv4-per-ENI figure of any instance type: the cap for an ENI not attached anywhere.
pub const UNATTACHED_IPV4_LIMIT: u32 = 50;
/// The same cap for IPv6 (EC2's per-ENI IPv6 figure equals the IPv4 one on every type that has IPv6).
pub const UNATTACHED_IPV6_LIMIT: u32 = UNATTACHED_IPV4_LIMIT;
/// Length of a VPC's Amazon-provided IPv6 CIDR.
pub const VPC_V6_LEN: u8 = 56;
/// Where a VPC's IPv6 /56 is drawn from when none is given: the first half of the documentation
/// range 2001:db8::/32, so no simulated address can ever be a real one, and the other half
/// (2001:db8:8000::/33) stays free for whatever sits outside the VPC.
pub const VPC_V6_POOL: Ipv6Network =
    match Ipv6Network::new_checked(Ipv6Addr::new(0x2001, 0x0db8, 0, 0, 0, 0, 0, 0), 33) {
        Some(n) => n,
        None => panic!("2001:db8::/33 is a valid network"),
    };

/// The private DNS name EC2 gives `ip` in `region` (`ip-10-0-0-5.us-west-2.compute.internal`).
pub fn private_dns_name(region: &str, ip: Ipv4Addr) -> String {
    let host = format!("ip-{}", ip.to_string().replace('.', "-"));
    if region == "us-east-1" {
        format!("{host}.ec2.internal")
    } else {
        format!("{host}.{region}.compute.internal")
    }
}

/// The AZ id AWS would show for `az` (`us-west-2a` -> `usw2-az1`).
pub fn az_id(az: &str) -> String {
    let (region, letter) = az.split_at(az.len().saturating_sub(1));
    let short: String = region
        .split('-')
        .map(|part| match part.parse::<u32>() {
            Ok(_) => part.to_string(),
            Err(_) => part
                .chars()
                .take(if part.len() == 2 { 2 } else { 1 })
                .collect(),
        })
        .collect();
    let n = letter
        .bytes()
        .next()
        .map_or(1, |b| u32::from(b.saturating_sub(b'a')) + 1);
    format!("{short}-az{n}")
}

/// One subnet to build at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetSpec {
    /// Its CIDR, inside one of the VPC's.
    pub cidr: Ipv4Network,
    /// Its availability zone; the VPC's default AZ when `None`.
    pub az: Option<String>,
    /// Its tags.
    pub tags: Tags,
    /// Instances to launch in it; `None` for the first subnet, which takes every instance no
    /// other subnet asks for.
    pub nodes: Option<usize>,
    /// How many of its /28 blocks hold an address owned by someone else.
    pub fragment: Fragment,
}

impl SubnetSpec {
    /// A subnet in the default AZ, without tags.
    pub fn new(cidr: Ipv4Network) -> Self {
        Self {
            cidr,
            az: None,
            tags: Tags::new(),
            nodes: None,
            fragment: Fragment::None,
        }
    }
}

/// What to build at startup.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Primary VPC CIDR.
    pub vpc_cidr: Ipv4Network,
    /// More VPC CIDRs, in association order.
    pub secondary_cidrs: Vec<Ipv4Network>,
    /// Region, e.g. `us-west-2`; the VPC's default AZ is `<region>a`.
    pub region: String,
    /// Subnets; instances go into the first unless a subnet asks for some.
    pub subnets: Vec<SubnetSpec>,
    /// Number of instances.
    pub nodes: usize,
    /// Their type.
    pub instance_type: String,
    /// Instance types beyond the embedded table (name, limits).
    pub extra_types: Vec<(String, InstanceLimits)>,
    /// Names of security groups to create besides the VPC's default one.
    pub security_groups: Vec<String>,
    /// Whether the VPC gets an IPv6 /56 and every subnet a /64 of it (numbered by the subnet's
    /// position); without, nothing about the VPC is IPv6.
    pub ipv6: bool,
    /// The VPC's /56 when `ipv6`; drawn from [`VPC_V6_POOL`] when `None`.
    pub vpc_ipv6_cidr: Option<Ipv6Network>,
}

/// The whole simulated VPC.
#[derive(Debug, Clone)]
pub struct Model {
    vpc: Vpc,
    subnets: BTreeMap<String, Subnet>,
    instances: BTreeMap<String, Instance>,
    enis: BTreeMap<String, Eni>,
    /// The ENIs attached to each instance, and the ENI of each attachment id: an index of
    /// `enis`' attachments, kept with them, so an instance's ENIs are found without a look at
    /// every ENI of the VPC.
    attached: BTreeMap<String, BTreeSet<String>>,
    attachment_enis: BTreeMap<String, String>,
    security_groups: BTreeMap<String, SecurityGroup>,
    types: InstanceTable,
    extra_types: BTreeSet<String>,
    ids: IdGen,
    /// CreateNetworkInterface's client tokens: the request, and the ENI as it was created.
    client_tokens: BTreeMap<String, (CreateEni, Eni)>,
}

/// Whether `cidr` is a network address with a mask EC2 accepts for a VPC or a subnet.
fn well_formed_cidr(cidr: Ipv4Network) -> bool {
    (16..=28).contains(&cidr.prefix()) && cidr.ip() == cidr.network()
}

impl Model {
    /// An empty VPC with its default security group. `types` is the instance table to enforce.
    pub fn new(
        vpc_cidr: Ipv4Network,
        region: &str,
        types: InstanceTable,
        rng: Rng,
    ) -> Result<Self, ModelError> {
        if !well_formed_cidr(vpc_cidr) {
            return Err(ModelError::invalid(format!(
                "The CIDR '{vpc_cidr}' is invalid: a VPC is a network address with a /16 to /28 mask."
            )));
        }
        let mut ids = IdGen::new(rng);
        let vpc = Vpc {
            id: ids.id("vpc"),
            cidr: vpc_cidr,
            secondary_cidrs: Vec::new(),
            region: region.to_string(),
            az: format!("{region}a"),
            owner_id: ACCOUNT_ID.to_string(),
            default_security_group: ids.id("sg"),
            tags: Tags::new(),
            ipv6_cidr: None,
        };
        let default_group = SecurityGroup {
            id: vpc.default_security_group.clone(),
            name: "default".to_string(),
            description: "default VPC security group".to_string(),
            vpc_id: vpc.id.clone(),
            tags: Tags::new(),
        };
        Ok(Self {
            vpc,
            subnets: BTreeMap::new(),
            instances: BTreeMap::new(),
            enis: BTreeMap::new(),
            attached: BTreeMap::new(),
            attachment_enis: BTreeMap::new(),
            security_groups: [(default_group.id.clone(), default_group)].into(),
            types,
            extra_types: BTreeSet::new(),
            ids,
            client_tokens: BTreeMap::new(),
        })
    }

    /// Builds the startup topology: VPC and its CIDRs, security groups, subnets, and `nodes`
    /// instances: each subnet's own count, the rest in the first subnet, which launches first.
    pub fn build(t: &Topology, rng: Rng, now_ms: u64) -> Result<Self, ModelError> {
        let mut m = Self::new(
            t.vpc_cidr,
            &t.region,
            InstanceTable::embedded().clone(),
            rng,
        )?;
        for cidr in &t.secondary_cidrs {
            m.add_vpc_cidr(*cidr)?;
        }
        if t.ipv6 {
            m.add_vpc_ipv6_cidr(t.vpc_ipv6_cidr)?;
        } else if let Some(cidr) = t.vpc_ipv6_cidr {
            return Err(ModelError::invalid(format!(
                "The IPv6 CIDR '{cidr}' is given for a VPC without IPv6."
            )));
        }
        for (name, limits) in &t.extra_types {
            m.add_instance_type(name, *limits);
        }
        for name in &t.security_groups {
            let vpc = m.vpc.id.clone();
            m.create_security_group(name, &format!("vpc-sim group {name}"), &vpc, Tags::new())?;
        }
        let mut placed = Vec::new();
        for spec in &t.subnets {
            let id = m.add_subnet(spec.cidr, spec.az.as_deref(), spec.tags.clone())?;
            // Before any instance launches: the strays were there before the cluster was.
            m.set_fragment(&id, spec.fragment)?;
            if t.ipv6 {
                // Before any instance launches, so primary ENIs get their IPv6 address.
                m.associate_subnet_ipv6_cidr(&id, None)?;
            }
            placed.push((id, spec.nodes));
        }
        let [(first, None), rest @ ..] = placed.as_slice() else {
            return Err(ModelError::invalid(
                "at least one subnet is needed, and the first takes the nodes no other subnet takes",
            ));
        };
        let elsewhere: usize = rest.iter().filter_map(|(_, n)| *n).sum();
        let Some(in_first) = t.nodes.checked_sub(elsewhere) else {
            return Err(ModelError::invalid(format!(
                "{elsewhere} nodes are asked for in later subnets, but there are only {}",
                t.nodes
            )));
        };
        let counts = std::iter::once((first, in_first))
            .chain(rest.iter().map(|(id, n)| (id, n.unwrap_or(0))));
        for (subnet, n) in counts {
            for _ in 0..n {
                m.launch_instance(&t.instance_type, subnet, now_ms)?;
            }
        }
        Ok(m)
    }

    /// Associates another IPv4 CIDR with the VPC; it must be well formed and overlap none of
    /// the VPC's CIDRs.
    pub fn add_vpc_cidr(&mut self, cidr: Ipv4Network) -> Result<(), ModelError> {
        if !well_formed_cidr(cidr) {
            return Err(ModelError::invalid(format!(
                "The CIDR '{cidr}' is invalid: a VPC CIDR is a network address with a /16 to /28 mask."
            )));
        }
        if let Some(other) = self.vpc.cidrs().into_iter().find(|c| c.overlaps(cidr)) {
            return Err(ModelError::invalid(format!(
                "The CIDR '{cidr}' overlaps {other}, already a CIDR of {}.",
                self.vpc.id
            )));
        }
        self.vpc.secondary_cidrs.push(cidr);
        Ok(())
    }

    /// Adds (or replaces) an instance type.
    pub fn add_instance_type(&mut self, name: &str, limits: InstanceLimits) {
        self.types.insert(name, limits);
        self.extra_types.insert(name.to_string());
    }

    /// Limits of `instance_type`.
    pub fn limits(&self, instance_type: &str) -> Result<InstanceLimits, ModelError> {
        self.types
            .get(instance_type)
            .ok_or_else(|| ModelError::UnknownInstanceType(vec![instance_type.to_string()]))
    }

    /// Types added with [`Model::add_instance_type`].
    pub fn extra_types(&self) -> impl Iterator<Item = &str> {
        self.extra_types.iter().map(String::as_str)
    }

    /// Adds a subnet in `az` (the VPC's default AZ when `None`) with `tags`. It must lie inside
    /// one of the VPC's CIDRs, be /16../28 and overlap no other subnet; the AZ must be one of
    /// the region's (`<region>` and one letter).
    pub fn add_subnet(
        &mut self,
        cidr: Ipv4Network,
        az: Option<&str>,
        tags: Tags,
    ) -> Result<String, ModelError> {
        let cidrs = self.vpc.cidrs();
        let inside = cidrs
            .iter()
            .any(|v| v.contains(cidr.network()) && v.contains(cidr.broadcast()));
        if !well_formed_cidr(cidr) || !inside {
            let all: Vec<String> = cidrs.iter().map(|c| c.to_string()).collect();
            return Err(ModelError::invalid(format!(
                "The CIDR '{cidr}' is invalid: a subnet is a network address inside a CIDR of the VPC ({}) with a /16 to /28 mask.",
                all.join(", ")
            )));
        }
        if let Some(other) = self.subnets.values().find(|s| s.cidr.overlaps(cidr)) {
            return Err(ModelError::invalid(format!(
                "The CIDR '{cidr}' conflicts with another subnet ({} {}).",
                other.id, other.cidr
            )));
        }
        let az = az.unwrap_or(&self.vpc.az);
        if !in_region(az, &self.vpc.region) {
            return Err(ModelError::invalid(format!(
                "Value ({az}) for parameter availabilityZone is invalid. Subnets can currently only be created in the availability zones of {} ({}a, {}b, ...).",
                self.vpc.region, self.vpc.region, self.vpc.region
            )));
        }
        let id = self.ids.id("subnet");
        let subnet = Subnet {
            id: id.clone(),
            cidr,
            az: az.to_string(),
            tags,
            index: self.subnets.len(),
            space: AddressSpace::new(cidr),
            ipv6: None,
        };
        self.subnets.insert(id.clone(), subnet);
        Ok(id)
    }

    /// Associates an IPv6 /56 with the VPC (one at most, as an Amazon-provided block): `cidr`,
    /// or one drawn from [`VPC_V6_POOL`] with the model's random source.
    pub fn add_vpc_ipv6_cidr(
        &mut self,
        cidr: Option<Ipv6Network>,
    ) -> Result<Ipv6Network, ModelError> {
        if let Some(have) = self.vpc.ipv6_cidr {
            return Err(ModelError::invalid(format!(
                "{} already has the IPv6 CIDR {have}.",
                self.vpc.id
            )));
        }
        let cidr = match cidr {
            Some(c) if c.prefix() == VPC_V6_LEN && c.ip() == c.network() => c,
            Some(c) => {
                return Err(ModelError::invalid(format!(
                    "The IPv6 CIDR '{c}' is invalid: a VPC's IPv6 CIDR is a network address with a /56 mask."
                )));
            }
            None => self.draw_vpc_ipv6_cidr()?,
        };
        self.vpc.ipv6_cidr = Some(cidr);
        Ok(cidr)
    }

    fn draw_vpc_ipv6_cidr(&mut self) -> Result<Ipv6Network, ModelError> {
        let pool = u128::from(VPC_V6_POOL.network());
        let choices = 1u128 << (VPC_V6_LEN - VPC_V6_POOL.prefix());
        let n = u128::from(self.ids.next_u64()) % choices;
        let start = pool | (n << (128 - VPC_V6_LEN));
        Ipv6Network::new(Ipv6Addr::from(start), VPC_V6_LEN)
            .map_err(|e| ModelError::invalid(format!("drawing the VPC's IPv6 CIDR: {e}")))
    }

    /// Associates an IPv6 /64 of the VPC's /56 with a subnet (EC2's AssociateSubnetCidrBlock):
    /// `cidr`, or the lowest /64 no other subnet has. One per subnet, as in EC2.
    pub fn associate_subnet_ipv6_cidr(
        &mut self,
        subnet_id: &str,
        cidr: Option<Ipv6Network>,
    ) -> Result<Ipv6Network, ModelError> {
        let subnet = self.subnet(subnet_id)?;
        let Some(vpc6) = self.vpc.ipv6_cidr else {
            return Err(ModelError::invalid(format!(
                "{} has no IPv6 CIDR block to take a subnet CIDR from.",
                self.vpc.id
            )));
        };
        if let Some(have) = subnet.ipv6_cidr() {
            return Err(ModelError::invalid(format!(
                "{subnet_id} already has the IPv6 CIDR {have}."
            )));
        }
        let taken: Vec<Ipv6Network> = self
            .subnets
            .values()
            .filter_map(|s| s.ipv6_cidr())
            .collect();
        let cidr = match cidr {
            Some(c) => {
                if c.prefix() != SUBNET_V6_LEN || c.ip() != c.network() || !vpc6.contains(c.ip()) {
                    return Err(ModelError::invalid(format!(
                        "The IPv6 CIDR '{c}' is invalid: a subnet's IPv6 CIDR is a /64 inside the VPC's {vpc6}."
                    )));
                }
                if taken.contains(&c) {
                    return Err(ModelError::invalid(format!(
                        "The IPv6 CIDR '{c}' conflicts with another subnet."
                    )));
                }
                c
            }
            None => {
                let per_vpc = 1u128 << (SUBNET_V6_LEN - VPC_V6_LEN);
                let base = u128::from(vpc6.network());
                (0..per_vpc)
                    .filter_map(|i| {
                        let ip = Ipv6Addr::from(base | (i << (128 - SUBNET_V6_LEN)));
                        Ipv6Network::new(ip, SUBNET_V6_LEN).ok()
                    })
                    .find(|c| !taken.contains(c))
                    .ok_or_else(|| {
                        ModelError::invalid(format!("Every /64 of {vpc6} is taken by a subnet."))
                    })?
            }
        };
        let association_id = self.ids.id("subnet-cidr-assoc");
        if let Some(s) = self.subnets.get_mut(subnet_id) {
            s.ipv6 = Some(SubnetIpv6 {
                cidr,
                association_id,
                space: Ipv6Space::new(cidr),
            });
        }
        Ok(cidr)
    }

    /// Launches an instance with a primary ENI (device 0, DeleteOnTermination) in `subnet_id`,
    /// in that subnet's AZ.
    pub fn launch_instance(
        &mut self,
        instance_type: &str,
        subnet_id: &str,
        now_ms: u64,
    ) -> Result<String, ModelError> {
        let limits = self.limits(instance_type)?;
        let az = self.subnet(subnet_id)?.az.clone();
        // A type without IPv6 launches into an IPv6 subnet with an IPv4-only primary ENI.
        let no_ipv6 = ipv6_per_eni(instance_type, &limits) == 0;
        let eni_id = self
            .create_eni(
                CreateEni {
                    subnet_id: subnet_id.to_string(),
                    ipv6_address_count: no_ipv6.then_some(0),
                    ..CreateEni::default()
                },
                now_ms,
            )?
            .id
            .clone();
        let id = self.ids.id("i");
        let attachment = Attachment {
            id: self.ids.id("eni-attach"),
            instance_id: id.clone(),
            device_index: 0,
            network_card_index: 0,
            delete_on_termination: true,
            attached_ms: now_ms,
        };
        if let Some(eni) = self.enis.get_mut(&eni_id) {
            eni.description = "Primary network interface".to_string();
            eni.status = EniStatus::InUse;
            eni.attachment = Some(attachment.clone());
            self.index_attachment(&eni_id, &attachment);
        }
        let instance = Instance {
            id: id.clone(),
            // Not the count: a terminated instance would leave its number to another.
            index: self
                .instances
                .values()
                .map(|i| i.index + 1)
                .max()
                .unwrap_or(0),
            instance_type: instance_type.to_string(),
            subnet_id: subnet_id.to_string(),
            az,
            primary_eni: eni_id,
            image_id: "ami-0123456789abcdef0".to_string(),
            launched_ms: now_ms,
            tags: Tags::new(),
        };
        self.instances.insert(id.clone(), instance);
        Ok(id)
    }

    /// The VPC.
    pub fn vpc(&self) -> &Vpc {
        &self.vpc
    }

    /// Subnets in creation order.
    pub fn subnets(&self) -> Vec<&Subnet> {
        let mut v: Vec<&Subnet> = self.subnets.values().collect();
        v.sort_by_key(|s| s.index);
        v
    }

    /// A subnet by id.
    pub fn subnet(&self, id: &str) -> Result<&Subnet, ModelError> {
        self.subnets
            .get(id)
            .ok_or_else(|| ModelError::SubnetNotFound(vec![id.to_string()]))
    }

    /// Instances in launch order.
    pub fn instances(&self) -> Vec<&Instance> {
        let mut v: Vec<&Instance> = self.instances.values().collect();
        v.sort_by_key(|i| i.index);
        v
    }

    /// An instance by id (`InvalidInstanceID.Malformed` / `.NotFound` otherwise).
    pub fn instance(&self, id: &str) -> Result<&Instance, ModelError> {
        if !well_formed(id, "i") {
            return Err(ModelError::InstanceMalformed(id.to_string()));
        }
        self.instances
            .get(id)
            .ok_or_else(|| ModelError::InstanceNotFound(vec![id.to_string()]))
    }

    /// All ENIs, ordered by id.
    pub fn enis(&self) -> impl Iterator<Item = &Eni> {
        self.enis.values()
    }

    /// An ENI by id (`InvalidNetworkInterfaceID.Malformed` / `.NotFound` otherwise).
    pub fn eni(&self, id: &str) -> Result<&Eni, ModelError> {
        if !well_formed(id, "eni") {
            return Err(ModelError::EniMalformed(id.to_string()));
        }
        self.enis
            .get(id)
            .ok_or_else(|| ModelError::EniNotFound(vec![id.to_string()]))
    }

    fn eni_mut(&mut self, id: &str) -> Result<&mut Eni, ModelError> {
        self.eni(id)?;
        self.enis
            .get_mut(id)
            .ok_or_else(|| ModelError::EniNotFound(vec![id.to_string()]))
    }

    /// ENIs attached to `instance_id`, by device index.
    pub fn enis_of(&self, instance_id: &str) -> Vec<&Eni> {
        // In id order before the (stable) sort, as a walk over `enis` finds them.
        let mut v: Vec<&Eni> = self
            .attached
            .get(instance_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.enis.get(id))
            .collect();
        v.sort_by_key(|e| e.attachment.as_ref().map(|a| a.device_index));
        v
    }

    /// Adds ENI `eni_id`'s new `attachment` to the index of attachments.
    fn index_attachment(&mut self, eni_id: &str, attachment: &Attachment) {
        self.attached
            .entry(attachment.instance_id.clone())
            .or_default()
            .insert(eni_id.to_string());
        self.attachment_enis
            .insert(attachment.id.clone(), eni_id.to_string());
    }

    /// Takes ENI `eni_id`'s ended `attachment` out of the index of attachments.
    fn unindex_attachment(&mut self, eni_id: &str, attachment: &Attachment) {
        if let Some(ids) = self.attached.get_mut(&attachment.instance_id) {
            ids.remove(eni_id);
            if ids.is_empty() {
                self.attached.remove(&attachment.instance_id);
            }
        }
        self.attachment_enis.remove(&attachment.id);
    }

    /// Fresh random hex (request ids, tokens).
    pub fn random_hex(&mut self, n: usize) -> String {
        self.ids.hex(n)
    }

    /// Whether `ip` is assigned anywhere in the VPC.
    pub fn address_in_use(&self, ip: Ipv4Addr) -> bool {
        self.subnets.values().any(|s| s.space.in_use(ip))
    }

    /// Whether the IPv6 address `ip` is assigned anywhere in the VPC (alone or in a prefix).
    pub fn ipv6_in_use(&self, ip: Ipv6Addr) -> bool {
        self.subnets
            .values()
            .filter_map(|s| s.ipv6.as_ref())
            .any(|v| v.space.in_use(ip))
    }

    /// Everything, for `GET /_sim/state`.
    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            vpc: &self.vpc,
            subnets: self
                .subnets()
                .into_iter()
                .map(|s| SubnetSnapshot {
                    subnet: s,
                    available_ip_address_count: s.available_ip_address_count(),
                    router: s.router(),
                })
                .collect(),
            instances: self.instances(),
            enis: self.enis.values().collect(),
            security_groups: self.security_groups().collect(),
        }
    }
}

/// Whether `az` names an availability zone of `region`: the region and one letter.
fn in_region(az: &str, region: &str) -> bool {
    az.strip_prefix(region)
        .is_some_and(|letter| letter.len() == 1 && letter.bytes().all(|b| b.is_ascii_lowercase()))
}

/// Serializable view of the whole model.
#[derive(Debug, Serialize)]
pub struct Snapshot<'a> {
    /// The VPC.
    pub vpc: &'a Vpc,
    /// Subnets with their free counts.
    pub subnets: Vec<SubnetSnapshot<'a>>,
    /// Instances.
    pub instances: Vec<&'a Instance>,
    /// ENIs.
    pub enis: Vec<&'a Eni>,
    /// Security groups, the default one included.
    pub security_groups: Vec<&'a SecurityGroup>,
}

/// A subnet plus derived figures.
#[derive(Debug, Serialize)]
pub struct SubnetSnapshot<'a> {
    /// The subnet.
    #[serde(flatten)]
    pub subnet: &'a Subnet,
    /// Free addresses.
    pub available_ip_address_count: u32,
    /// Router address.
    pub router: Ipv4Addr,
}
