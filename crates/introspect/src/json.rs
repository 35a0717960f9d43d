//! The JSON bodies of the introspection endpoints, and how each is built from a [`PoolView`].
//! Keys follow the Go CNI where it has the endpoint; maps are `BTreeMap`s because Go's
//! encoder sorts map keys.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet_text::{mask_base64, mask6_base64, network_key};
use pool::{Action, AddrSlot, EniInfo, PREFIX_LEN, SlotState};
use serde::{Deserialize, Serialize};

use crate::gotime;
use crate::view::{ClusterStatus, PoolView};

/// `/v1/enis` for one network card (the Go CNI's `datastore.ENIInfos`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EniInfos {
    /// Addresses held for pods (every member of a /28 counts).
    #[serde(rename = "TotalIPs")]
    pub total_ips: u32,
    /// Addresses held by pods.
    #[serde(rename = "AssignedIPs")]
    pub assigned_ips: u32,
    /// ENIs by id.
    #[serde(rename = "ENIs")]
    pub enis: BTreeMap<String, Eni>,
}

/// One ENI (the Go CNI's `datastore.ENI`, exported fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eni {
    /// `eni-...`.
    #[serde(rename = "ID")]
    pub id: String,
    /// The primary ENI.
    #[serde(rename = "IsPrimary")]
    pub is_primary: bool,
    /// Always false: we have no trunk ENIs (security groups for pods).
    #[serde(rename = "IsTrunk")]
    pub is_trunk: bool,
    /// Always false: we manage no EFA ENIs.
    #[serde(rename = "IsEFA")]
    pub is_efa: bool,
    /// Attachment device index.
    #[serde(rename = "DeviceNumber")]
    pub device_number: u32,
    /// Secondary addresses as `/32`s and delegated prefixes as `/28`s, by CIDR.
    #[serde(rename = "AvailableIPv4Cidrs")]
    pub available_ipv4_cidrs: BTreeMap<String, CidrInfo>,
    /// The delegated IPv6 /80s (IPv6 mode and dual-stack), with the addresses held or cooling.
    #[serde(rename = "IPv6Cidrs")]
    pub ipv6_cidrs: BTreeMap<String, CidrInfo>,
    /// It gives no address to new pods (the primary ENI under custom networking).
    #[serde(rename = "IsExcludedForPodIPs")]
    pub is_excluded_for_pod_ips: bool,
    /// The host routing table for traffic from its pods (254 = main, for the primary ENI).
    #[serde(rename = "RouteTableID")]
    pub route_table_id: u32,
    /// Its subnet.
    #[serde(rename = "SubnetID")]
    pub subnet_id: String,
    /// Ours: why ipamd created it in that subnet (custom networking, subnet discovery or the
    /// node's subnet); absent for ENIs it did not create since it started.
    #[serde(
        rename = "SubnetChoice",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub subnet_choice: Option<String>,
}

/// A secondary /32 or a delegated /28 (the Go CNI's `datastore.CidrInfo`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CidrInfo {
    /// The CIDR as Go marshals a `net.IPNet`.
    #[serde(rename = "Cidr")]
    pub cidr: IpNet,
    /// Every address it holds for pods, by address; free ones have an empty `IPAMKey`.
    #[serde(rename = "IPAddresses")]
    pub ip_addresses: BTreeMap<String, AddressInfo>,
    /// True for a delegated prefix.
    #[serde(rename = "IsPrefix")]
    pub is_prefix: bool,
    /// Empty, as the Go CNI's introspection copy leaves it.
    #[serde(rename = "AddressFamily")]
    pub address_family: String,
}

/// Go's `net.IPNet` in JSON: the address as text, the mask as base64 bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpNet {
    /// `a.b.c.d`.
    #[serde(rename = "IP")]
    pub ip: String,
    /// The mask's four bytes in base64 (`/////w==` for a /32).
    #[serde(rename = "Mask")]
    pub mask: String,
}

/// One address (the Go CNI's `datastore.AddressInfo`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressInfo {
    /// `a.b.c.d`.
    #[serde(rename = "Address")]
    pub address: String,
    /// Who holds it: all empty when free.
    #[serde(rename = "IPAMKey")]
    pub ipam_key: IpamKey,
    /// For which pod.
    #[serde(rename = "IPAMMetadata")]
    pub ipam_metadata: IpamMetadata,
    /// When it was assigned; Go's zero time when free (we keep no time for free addresses).
    #[serde(rename = "AssignedTime")]
    pub assigned_time: String,
    /// When it was last released; Go's zero time if never.
    #[serde(rename = "UnassignedTime")]
    pub unassigned_time: String,
}

/// The holder's key, with the container id and interface name blanked as the Go CNI does
/// since v1.23: with them anyone able to read this endpoint could forge a DEL.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpamKey {
    /// The network name from the conflist; empty when free.
    #[serde(rename = "networkName")]
    pub network_name: String,
    /// Always empty.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Always empty.
    #[serde(rename = "ifName")]
    pub if_name: String,
}

/// The holder's pod; fields are left out when empty, as Go's `omitempty` does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpamMetadata {
    /// Pod namespace.
    #[serde(
        rename = "k8sPodNamespace",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub k8s_pod_namespace: String,
    /// Pod name.
    #[serde(
        rename = "k8sPodName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub k8s_pod_name: String,
    /// Interfaces the pod got from us: 1 when assigned (one address per attachment).
    #[serde(rename = "interfacesCount", default, skip_serializing_if = "is_zero")]
    pub interfaces_count: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// `/v1/enis`: everything on network card 0, keyed `"0"` as the Go CNI keys cards (we manage
/// one card).
pub fn enis(view: &PoolView) -> BTreeMap<String, EniInfos> {
    let counts = view.pool.counts(view.now);
    let enis = view
        .pool
        .enis()
        .map(|info| (info.id.clone(), eni(view, info)))
        .collect();
    let card = EniInfos {
        total_ips: counts.total,
        assigned_ips: counts.assigned,
        enis,
    };
    BTreeMap::from([("0".to_string(), card)])
}

fn eni(view: &PoolView, info: &EniInfo) -> Eni {
    let mut cidrs: BTreeMap<String, CidrInfo> = BTreeMap::new();
    for (ip, slot) in view.pool.addresses(&info.id) {
        let (network, len) = match slot.prefix {
            Some(prefix) => (prefix.network(), PREFIX_LEN),
            None => (ip, 32),
        };
        cidrs
            .entry(network_key(network, len))
            .or_insert_with(|| CidrInfo {
                cidr: IpNet {
                    ip: network.to_string(),
                    mask: mask_base64(len),
                },
                ip_addresses: BTreeMap::new(),
                is_prefix: slot.prefix.is_some(),
                address_family: String::new(),
            })
            .ip_addresses
            .insert(ip.to_string(), address(ip.into(), slot));
    }
    // A prefix is listed even if the pool somehow holds none of its members.
    for prefix in view.pool.prefixes(&info.id) {
        cidrs
            .entry(network_key(prefix.network(), PREFIX_LEN))
            .or_insert_with(|| CidrInfo {
                cidr: IpNet {
                    ip: prefix.network().to_string(),
                    mask: mask_base64(PREFIX_LEN),
                },
                ip_addresses: BTreeMap::new(),
                is_prefix: true,
                address_family: String::new(),
            });
    }
    Eni {
        id: info.id.clone(),
        is_primary: info.is_primary(),
        is_trunk: false,
        is_efa: false,
        device_number: info.device_number,
        available_ipv4_cidrs: cidrs,
        ipv6_cidrs: ipv6_cidrs(view, &info.id),
        is_excluded_for_pod_ips: view.pool.is_excluded(&info.id),
        route_table_id: netops::eni_table(info.device_number),
        subnet_id: info.subnet_id.clone(),
        subnet_choice: view.placements.get(&info.id).cloned(),
    }
}

/// The /80s delegated to ENI `eni_id`, each with its addresses held or cooling.
fn ipv6_cidrs(view: &PoolView, eni_id: &str) -> BTreeMap<String, CidrInfo> {
    let v6 = view.pool.v6();
    let (_, addrs) = v6.to_state();
    v6.prefixes()
        .filter(|(_, eni)| *eni == eni_id)
        .map(|(prefix, _)| {
            let ip_addresses = addrs
                .iter()
                .filter(|a| prefix.contains(a.ip))
                .map(|a| {
                    let slot = AddrSlot {
                        state: a.state.clone(),
                        released_at: None,
                        prefix: None,
                    };
                    (a.ip.to_string(), address(a.ip.into(), &slot))
                })
                .collect();
            let info = CidrInfo {
                cidr: IpNet {
                    ip: prefix.network().to_string(),
                    mask: mask6_base64(prefix.prefix()),
                },
                ip_addresses,
                is_prefix: true,
                address_family: "6".into(),
            };
            (prefix.to_string(), info)
        })
        .collect()
}

fn address(ip: IpAddr, slot: &AddrSlot) -> AddressInfo {
    let (ipam_key, ipam_metadata, assigned_time) = match &slot.state {
        SlotState::Assigned {
            key,
            pod,
            assigned_at,
        } => (
            IpamKey {
                network_name: key.network.clone(),
                ..IpamKey::default()
            },
            IpamMetadata {
                k8s_pod_namespace: pod.namespace.clone(),
                k8s_pod_name: pod.name.clone(),
                interfaces_count: 1,
            },
            gotime::format(*assigned_at),
        ),
        SlotState::Free { .. } => (
            IpamKey::default(),
            IpamMetadata::default(),
            gotime::ZERO.to_string(),
        ),
    };
    AddressInfo {
        address: ip.to_string(),
        ipam_key,
        ipam_metadata,
        assigned_time,
        unassigned_time: gotime::format_opt(slot.released_at),
    }
}

/// `/v1/pods` (ours; the Go CNI dropped its own in v1.7): one entry per assigned address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodEntry {
    /// Pod namespace (empty outside Kubernetes).
    #[serde(rename = "Namespace")]
    pub namespace: String,
    /// Pod name.
    #[serde(rename = "Name")]
    pub name: String,
    /// Its address.
    #[serde(rename = "IP")]
    pub ip: String,
    /// The ENI holding the address.
    #[serde(rename = "ENI")]
    pub eni: String,
    /// That ENI's device number.
    #[serde(rename = "DeviceNumber")]
    pub device_number: u32,
    /// When the address was assigned (RFC 3339).
    #[serde(rename = "AssignedTime")]
    pub assigned_time: String,
    /// The pod-side interface name (`CNI_IFNAME`). Shown (the container id is not): the
    /// socket serving this is root-only.
    #[serde(rename = "Interface")]
    pub interface: String,
}

/// `/v1/pods`, sorted by namespace, name, then address.
pub fn pods(view: &PoolView) -> Vec<PodEntry> {
    let mut pods: Vec<PodEntry> = view
        .pool
        .allocations()
        .into_iter()
        .map(|a| PodEntry {
            namespace: a.pod.namespace,
            name: a.pod.name,
            ip: a.ip.to_string(),
            eni: a.eni_id,
            device_number: a.device_number,
            assigned_time: gotime::format(a.assigned_at),
            interface: a.key.ifname,
        })
        .collect();
    pods.extend(view.pool.v6().allocations().into_iter().map(|a| PodEntry {
        namespace: a.pod.namespace,
        name: a.pod.name,
        ip: a.ip.to_string(),
        eni: a.eni_id,
        device_number: 0,
        assigned_time: gotime::format(a.assigned_at),
        interface: a.key.ifname,
    }));
    pods.sort_by(|a, b| {
        (&a.namespace, &a.name)
            .cmp(&(&b.namespace, &b.name))
            .then_with(|| parse_or_max(&a.ip).cmp(&parse_or_max(&b.ip)))
    });
    pods
}

fn parse_or_max(ip: &str) -> IpAddr {
    ip.parse()
        .unwrap_or(IpAddr::V6(std::net::Ipv6Addr::from(u128::MAX)))
}

/// `/v1/ec2-refusals` (ours): each EC2 API whose calls were refused for lack of a
/// permission since ipamd started, for the doctor and operators: EC2 has no DryRun for the
/// address calls, so ipamd's own refused calls are the only witness of their denial.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ec2RefusalEntry {
    /// The API.
    #[serde(rename = "API")]
    pub api: String,
    /// EC2's error code.
    #[serde(rename = "Code")]
    pub code: String,
    /// EC2's message of the last refusal.
    #[serde(rename = "Message")]
    pub message: String,
    /// Refusals since ipamd started.
    #[serde(rename = "Count")]
    pub count: u64,
    /// The last one (RFC 3339).
    #[serde(rename = "LastRefused")]
    pub last_refused: String,
    /// Seconds from the last one to the snapshot.
    #[serde(rename = "SecondsAgo")]
    pub seconds_ago: u64,
}

/// `/v1/ec2-refusals`.
pub fn ec2_refusals(view: &PoolView) -> Vec<Ec2RefusalEntry> {
    view.refusals
        .iter()
        .map(|r| Ec2RefusalEntry {
            api: r.api.clone(),
            code: r.code.clone(),
            message: r.message.clone(),
            count: r.count,
            last_refused: gotime::format(r.last),
            seconds_ago: view.now.millis().saturating_sub(r.last.millis()) / 1000,
        })
        .collect()
}

/// `/v1/pool` (ours): the pool's numbers, limits and targets, and what the controller will do
/// next and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStatus {
    /// ipamd serves the plugin.
    #[serde(rename = "Ready")]
    pub ready: bool,
    /// The variable driving the pool: `WARM_ENI_TARGET`, `WARM_IP_TARGET` (with or without
    /// `MINIMUM_IP_TARGET`) or `WARM_PREFIX_TARGET`.
    #[serde(rename = "Mode")]
    pub mode: String,
    /// Counts now.
    #[serde(rename = "Totals")]
    pub totals: PoolTotals,
    /// The instance's limits.
    #[serde(rename = "Limits")]
    pub limits: PoolLimits,
    /// The warm-pool targets.
    #[serde(rename = "Targets")]
    pub targets: PoolTargets,
    /// When addresses were last given back (RFC 3339), if ever.
    #[serde(rename = "LastRelease")]
    pub last_release: Option<String>,
    /// Growth is held back after EC2 refused, until then (RFC 3339).
    #[serde(rename = "GrowthPausedUntil")]
    pub growth_paused_until: Option<String>,
    /// `GrowthPausedUntil` is still ahead.
    #[serde(rename = "GrowthPaused")]
    pub growth_paused: bool,
    /// Why growth last failed, if it did.
    #[serde(rename = "LastError")]
    pub last_error: Option<String>,
    /// The controller's next step (the first of `PlannedActions`), `null` when none.
    #[serde(rename = "NextAction")]
    pub next_action: Option<PlannedAction>,
    /// Every step of the current plan (a release round may hold one per ENI).
    #[serde(rename = "PlannedActions")]
    pub planned_actions: Vec<PlannedAction>,
    /// Why, in the planner's own comparisons.
    #[serde(rename = "Reason")]
    pub reason: String,
    /// The Kubernetes cluster as ipamd sees it.
    #[serde(rename = "Cluster")]
    pub cluster: ClusterStatus,
    /// Pods bound to the node that hold no address yet: the pool grows for them ahead of
    /// their ADDs.
    #[serde(rename = "PendingPods", default)]
    pub pending_pods: u32,
    /// The node is cordoned: no new ENI, and warm addresses are given back.
    #[serde(rename = "Draining", default)]
    pub draining: bool,
    /// Subnet-scarcity mode: one warm address, idle ones given back.
    #[serde(rename = "SubnetScarce", default)]
    pub subnet_scarce: bool,
    /// EC2 throttled the node within the last minute: the pool grows only for pods that
    /// wait, and the warm targets wait.
    #[serde(rename = "Ec2Congested", default)]
    pub ec2_congested: bool,
    /// With prefix delegation: where EC2 refused /28 prefixes and the pool took /32s instead.
    #[serde(rename = "PrefixFallback", default)]
    pub prefix_fallback: Option<PrefixFallbackStatus>,
}

/// With prefix delegation, the ENIs that hold /32s because EC2 found no free aligned /28 in
/// their subnet (`InsufficientCidrBlocks`), and whether new ENIs are created with /32s.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixFallbackStatus {
    /// Addresses held as /32s, on every ENI (`vpccni_prefix_fallback_ip_addresses`).
    #[serde(rename = "IPsHeldAsSlash32")]
    pub ips: u32,
    /// ENIs in a subnet where EC2 refused prefixes, or still holding /32s.
    #[serde(rename = "ENIs")]
    pub enis: Vec<EniFallback>,
    /// New ENIs: EC2 refused prefixes in every subnet they may go to.
    #[serde(rename = "NewENIs")]
    pub new_enis: Option<Refusal>,
}

/// One ENI of [`PrefixFallbackStatus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EniFallback {
    /// The ENI.
    #[serde(rename = "ENI")]
    pub eni: String,
    /// Its subnet.
    #[serde(rename = "SubnetID")]
    pub subnet: String,
    /// /32s it holds.
    #[serde(rename = "IPs")]
    pub ips: u32,
    /// EC2's refusal, while its subnet has not delegated a prefix since.
    #[serde(rename = "Refused")]
    pub refused: Option<Refusal>,
}

/// EC2's refusal of prefixes somewhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// First refusal (RFC 3339).
    #[serde(rename = "Since")]
    pub since: String,
    /// EC2's answer.
    #[serde(rename = "Reason")]
    pub reason: String,
    /// Refusals in a row.
    #[serde(rename = "Refusals")]
    pub refusals: u32,
    /// When prefixes are asked for again (RFC 3339).
    #[serde(rename = "RetryAt")]
    pub retry_at: String,
    /// Growth there is by /32s now (`RetryAt` is ahead).
    #[serde(rename = "Active")]
    pub active: bool,
}

impl Refusal {
    fn new(f: &pool::PrefixFallback, now: pool::Timestamp) -> Self {
        Refusal {
            since: gotime::format(f.since),
            reason: f.reason.clone(),
            refusals: f.refusals,
            retry_at: gotime::format(f.retry_at),
            active: f.active(now),
        }
    }
}

/// `PrefixFallback` of `/v1/pool`: `None` without prefix delegation.
pub fn prefix_fallback(view: &PoolView) -> Option<PrefixFallbackStatus> {
    if !view.targets.prefix_delegation {
        return None;
    }
    let fallbacks = view.pool.prefix_fallbacks();
    let enis: Vec<EniFallback> = view
        .pool
        .enis()
        .filter_map(|e| {
            let ips = view.pool.secondary_count(&e.id);
            let refused = fallbacks
                .subnets
                .get(&e.subnet_id)
                .map(|f| Refusal::new(f, view.now));
            (ips > 0 || refused.is_some()).then(|| EniFallback {
                eni: e.id.clone(),
                subnet: e.subnet_id.clone(),
                ips,
                refused,
            })
        })
        .collect();
    Some(PrefixFallbackStatus {
        ips: enis.iter().map(|e| e.ips).sum(),
        enis,
        new_enis: fallbacks
            .new_enis
            .as_ref()
            .map(|f| Refusal::new(f, view.now)),
    })
}

/// Address counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolTotals {
    /// Addresses held for pods.
    #[serde(rename = "TotalIPs")]
    pub total: u32,
    /// Held by pods.
    #[serde(rename = "AssignedIPs")]
    pub assigned: u32,
    /// Free but cooling down after a release.
    #[serde(rename = "CoolingIPs")]
    pub cooling: u32,
    /// Free now.
    #[serde(rename = "AvailableIPs")]
    pub available: u32,
    /// Delegated /28 prefixes.
    #[serde(rename = "Prefixes")]
    pub prefixes: u32,
    /// ENIs.
    #[serde(rename = "ENIs")]
    pub enis: u32,
}

/// The instance's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolLimits {
    /// ENIs the node may hold.
    #[serde(rename = "MaxENIs")]
    pub max_enis: u32,
    /// The pool stops growing at this many addresses.
    #[serde(rename = "MaxPods")]
    pub max_pods: u32,
    /// Address slots per ENI (secondary /32s, or /28 prefixes with delegation).
    #[serde(rename = "IPsPerENI")]
    pub ips_per_eni: u32,
    /// Most addresses the node can hold (`awscni_ip_max`).
    #[serde(rename = "MaxIPs")]
    pub max_ips: u64,
}

/// The warm-pool targets, by their variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolTargets {
    /// `WARM_ENI_TARGET`.
    #[serde(rename = "WARM_ENI_TARGET")]
    pub warm_eni: u32,
    /// `WARM_IP_TARGET`.
    #[serde(rename = "WARM_IP_TARGET")]
    pub warm_ip: u32,
    /// `MINIMUM_IP_TARGET`.
    #[serde(rename = "MINIMUM_IP_TARGET")]
    pub minimum_ip: u32,
    /// `WARM_PREFIX_TARGET` as set.
    #[serde(rename = "WARM_PREFIX_TARGET")]
    pub warm_prefix: u32,
    /// `ENABLE_PREFIX_DELEGATION`.
    #[serde(rename = "ENABLE_PREFIX_DELEGATION")]
    pub prefix_delegation: bool,
}

/// A planned step, tagged by `Kind`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "Kind")]
pub enum PlannedAction {
    /// Assign more secondary addresses to an ENI.
    AssignIps {
        /// The ENI.
        #[serde(rename = "ENI")]
        eni: String,
        /// How many.
        #[serde(rename = "Count")]
        count: u32,
    },
    /// Delegate more /28 prefixes to an ENI.
    AssignPrefixes {
        /// The ENI.
        #[serde(rename = "ENI")]
        eni: String,
        /// How many.
        #[serde(rename = "Count")]
        count: u32,
    },
    /// Create and attach an ENI pre-loaded with addresses or prefixes.
    CreateEni {
        /// Secondary addresses.
        #[serde(rename = "IPs")]
        ips: u32,
        /// Prefixes.
        #[serde(rename = "Prefixes")]
        prefixes: u32,
    },
    /// Give free secondary addresses back.
    ReleaseIps {
        /// Their ENI.
        #[serde(rename = "ENI")]
        eni: String,
        /// The addresses.
        #[serde(rename = "IPs")]
        ips: Vec<String>,
    },
    /// Give wholly free prefixes back.
    ReleasePrefixes {
        /// Their ENI.
        #[serde(rename = "ENI")]
        eni: String,
        /// The prefixes.
        #[serde(rename = "Prefixes")]
        prefixes: Vec<String>,
    },
    /// Detach and delete an unused ENI.
    FreeEni {
        /// The ENI.
        #[serde(rename = "ENI")]
        eni: String,
    },
}

impl From<&Action> for PlannedAction {
    fn from(a: &Action) -> Self {
        match a {
            Action::AssignIps { eni_id, count } => PlannedAction::AssignIps {
                eni: eni_id.clone(),
                count: *count,
            },
            Action::AssignPrefixes { eni_id, count } => PlannedAction::AssignPrefixes {
                eni: eni_id.clone(),
                count: *count,
            },
            Action::CreateEni { ips, prefixes } => PlannedAction::CreateEni {
                ips: *ips,
                prefixes: *prefixes,
            },
            Action::ReleaseIps { eni_id, ips } => PlannedAction::ReleaseIps {
                eni: eni_id.clone(),
                ips: ips.iter().map(ToString::to_string).collect(),
            },
            Action::ReleasePrefixes { eni_id, prefixes } => PlannedAction::ReleasePrefixes {
                eni: eni_id.clone(),
                prefixes: prefixes.iter().map(ToString::to_string).collect(),
            },
            Action::FreeEni { eni_id } => PlannedAction::FreeEni {
                eni: eni_id.clone(),
            },
        }
    }
}

/// `/v1/pool`.
pub fn pool_status(view: &PoolView) -> PoolStatus {
    let counts = view.pool.counts(view.now);
    let explained = view.explain();
    let planned_actions: Vec<PlannedAction> = explained
        .plan
        .actions
        .iter()
        .map(PlannedAction::from)
        .collect();
    PoolStatus {
        ready: view.ready,
        mode: view.mode_name().to_string(),
        totals: PoolTotals {
            total: counts.total,
            assigned: counts.assigned,
            cooling: counts.cooling,
            available: counts.available,
            prefixes: u32::try_from(view.prefix_count()).unwrap_or(u32::MAX),
            enis: u32::try_from(view.pool.enis().count()).unwrap_or(u32::MAX),
        },
        limits: PoolLimits {
            max_enis: view.limits.max_enis,
            max_pods: view.limits.max_pods,
            ips_per_eni: view.limits.secondary_ips_per_eni,
            max_ips: view.max_ips(),
        },
        targets: PoolTargets {
            warm_eni: view.targets.warm_eni,
            warm_ip: view.targets.warm_ip,
            minimum_ip: view.targets.minimum_ip,
            warm_prefix: view.targets.warm_prefix,
            prefix_delegation: view.targets.prefix_delegation,
        },
        last_release: view.last_release.map(gotime::format),
        growth_paused_until: view.growth_paused_until.map(gotime::format),
        growth_paused: view.growth_paused_until.is_some_and(|t| t > view.now),
        last_error: view.last_error.clone(),
        next_action: planned_actions.first().cloned(),
        planned_actions,
        reason: explained.reason.to_string(),
        cluster: view.cluster.clone(),
        pending_pods: view.pending,
        draining: view.draining,
        subnet_scarce: view.scarce,
        ec2_congested: view.congested,
        prefix_fallback: prefix_fallback(view),
    }
}

/// CIDR text and Go's mask encoding.
mod ipnet_text {
    use std::net::Ipv4Addr;

    /// `a.b.c.d/len`, the key Go's datastore uses.
    pub fn network_key(network: Ipv4Addr, len: u8) -> String {
        format!("{network}/{len}")
    }

    /// The mask of an IPv4 /`len` as Go marshals a `net.IPMask` (a byte slice): standard
    /// base64 of its four bytes.
    pub fn mask_base64(len: u8) -> String {
        let mask = u32::MAX
            .checked_shl(32 - u32::from(len.min(32)))
            .unwrap_or(0);
        base64(&mask.to_be_bytes())
    }

    /// The mask of an IPv6 /`len`, as Go marshals it: base64 of its sixteen bytes.
    pub fn mask6_base64(len: u8) -> String {
        let mask = u128::MAX
            .checked_shl(128 - u32::from(len.min(128)))
            .unwrap_or(0);
        base64(&mask.to_be_bytes())
    }

    fn base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..4 {
                if i <= chunk.len() {
                    s.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    s.push('=');
                }
            }
        }
        s
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn masks_encode_as_go_does() {
            // Go: base64 of []byte{255,255,255,255} and {255,255,255,240}.
            assert_eq!(mask_base64(32), "/////w==");
            assert_eq!(mask_base64(28), "////8A==");
            assert_eq!(mask_base64(24), "////AA==");
            assert_eq!(mask_base64(0), "AAAAAA==");
            assert_eq!(network_key(Ipv4Addr::new(10, 0, 0, 16), 28), "10.0.0.16/28");
            // Go: base64 of ten 0xff bytes and six zeros.
            assert_eq!(mask6_base64(80), "/////////////wAAAAAAAA==");
            assert_eq!(mask6_base64(128), "/////////////////////w==");
        }
    }
}
