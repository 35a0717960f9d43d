//! What an instance's IMDS shows: the model as of `lag` ago.
//!
//! Real IMDS is eventually consistent: an attachment or a new address shows up there seconds
//! after EC2 reported it. Every such change carries the time EC2 made it, so the lag is a filter
//! applied when reading, not a delay anyone waits for. Whatever existed at launch is visible at
//! once. Removals (detach, unassign) show immediately.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnetwork::{Ipv4Network, Ipv6Network};

use super::{ACCOUNT_ID, Model};

/// One instance as IMDS shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceView {
    /// `i-...`.
    pub instance_id: String,
    /// Type.
    pub instance_type: String,
    /// `ami-...`.
    pub image_id: String,
    /// AZ.
    pub az: String,
    /// Region.
    pub region: String,
    /// Primary ENI's primary address.
    pub primary_ip: Ipv4Addr,
    /// Primary ENI's MAC.
    pub primary_mac: String,
    /// Primary ENI's first visible IPv6 address (IMDS `meta-data/ipv6`).
    pub primary_ipv6: Option<Ipv6Addr>,
    /// Launch time, ms since the epoch.
    pub launched_ms: u64,
    /// Owner account.
    pub account_id: String,
    /// Visible interfaces by device number.
    pub interfaces: Vec<InterfaceView>,
}

/// One interface under `network/interfaces/macs/<mac>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceView {
    /// MAC.
    pub mac: String,
    /// `eni-...`.
    pub eni_id: String,
    /// Device index.
    pub device_number: u32,
    /// Network card.
    pub network_card: u32,
    /// Subnet.
    pub subnet_id: String,
    /// Subnet CIDR.
    pub subnet_cidr: Ipv4Network,
    /// VPC.
    pub vpc_id: String,
    /// Every VPC CIDR, the primary first.
    pub vpc_cidrs: Vec<Ipv4Network>,
    /// Visible private addresses, primary first.
    pub ipv4s: Vec<Ipv4Addr>,
    /// Visible prefixes.
    pub prefixes: Vec<Ipv4Network>,
    /// Visible IPv6 addresses.
    pub ipv6s: Vec<Ipv6Addr>,
    /// Visible IPv6 /80 prefixes.
    pub ipv6_prefixes: Vec<Ipv6Network>,
    /// The subnet's IPv6 CIDR, if any.
    pub subnet_ipv6_cidr: Option<Ipv6Network>,
    /// The VPC's IPv6 CIDR, if any.
    pub vpc_ipv6_cidr: Option<Ipv6Network>,
    /// Security groups: (id, name).
    pub security_groups: Vec<(String, String)>,
}

impl Model {
    /// The IMDS view of `instance_id` at `now_ms` with `lag_ms` of propagation delay; `None` when
    /// the instance does not exist.
    pub fn imds_view(&self, instance_id: &str, now_ms: u64, lag_ms: u64) -> Option<InstanceView> {
        let inst = self.instances.get(instance_id)?;
        let primary = self.enis.get(&inst.primary_eni)?;
        let visible = |at: u64| at <= inst.launched_ms || at.saturating_add(lag_ms) <= now_ms;
        let interfaces = self
            .enis_of(instance_id)
            .into_iter()
            .filter_map(|eni| {
                let att = eni.attachment.as_ref()?;
                if !visible(att.attached_ms) {
                    return None;
                }
                let subnet = self.subnets.get(&eni.subnet_id)?;
                let mut ipv4s = vec![eni.primary_ip];
                ipv4s.extend(
                    eni.secondary_ips
                        .iter()
                        .filter(|s| visible(s.at_ms))
                        .map(|s| s.value),
                );
                Some(InterfaceView {
                    mac: eni.mac.clone(),
                    eni_id: eni.id.clone(),
                    device_number: att.device_index,
                    network_card: att.network_card_index,
                    subnet_id: subnet.id.clone(),
                    subnet_cidr: subnet.cidr,
                    vpc_id: self.vpc.id.clone(),
                    vpc_cidrs: self.vpc.cidrs(),
                    ipv4s,
                    prefixes: eni
                        .prefixes
                        .iter()
                        .filter(|s| visible(s.at_ms))
                        .map(|s| s.value)
                        .collect(),
                    ipv6s: eni
                        .ipv6_addresses
                        .iter()
                        .filter(|s| visible(s.at_ms))
                        .map(|s| s.value)
                        .collect(),
                    ipv6_prefixes: eni
                        .ipv6_prefixes
                        .iter()
                        .filter(|s| visible(s.at_ms))
                        .map(|s| s.value)
                        .collect(),
                    subnet_ipv6_cidr: subnet.ipv6_cidr(),
                    vpc_ipv6_cidr: self.vpc.ipv6_cidr,
                    security_groups: eni
                        .security_groups
                        .iter()
                        .map(|g| (g.clone(), self.group_name(g).to_string()))
                        .collect(),
                })
            })
            .collect::<Vec<InterfaceView>>();
        // The instance's IPv6 as IMDS shows it: the primary interface's first, once visible.
        let primary_ipv6 = interfaces
            .iter()
            .find(|i| i.device_number == 0)
            .and_then(|i| i.ipv6s.first().copied());
        Some(InstanceView {
            instance_id: inst.id.clone(),
            instance_type: inst.instance_type.clone(),
            image_id: inst.image_id.clone(),
            az: inst.az.clone(),
            region: self.vpc.region.clone(),
            primary_ip: primary.primary_ip,
            primary_mac: primary.mac.clone(),
            primary_ipv6,
            launched_ms: inst.launched_ms,
            account_id: ACCOUNT_ID.to_string(),
            interfaces,
        })
    }
}
