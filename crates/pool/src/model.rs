use std::collections::HashSet;
use std::fmt;
use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;
use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// Prefix length of a delegated IPv4 prefix.
pub const PREFIX_LEN: u8 = 28;

/// Addresses in a delegated /28 prefix. All of them can be given to pods: EC2 reserves no
/// address inside a delegated prefix (the Go CNI uses all 16 too).
pub const ADDRS_PER_PREFIX: u32 = 16;

/// True when `prefix` is a prefix EC2 can delegate: a /28 named by its network address.
pub fn is_delegable_prefix(prefix: Ipv4Network) -> bool {
    prefix.prefix() == PREFIX_LEN && prefix.ip() == prefix.network()
}

/// One attachment of a container to a network: libcni's cache key, and the Go CNI's IPAM key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttachmentKey {
    /// Network name from the conflist.
    pub network: String,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
}

impl fmt::Display for AttachmentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.network, self.container_id, self.ifname)
    }
}

/// Who an address is for (from `CNI_ARGS`; may be empty outside Kubernetes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodInfo {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Sandbox container id.
    pub infra_container_id: String,
    /// Pod UID.
    pub uid: String,
    /// `CNI_NETNS` at ADD.
    pub netns: String,
}

/// An ENI the node holds addresses on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EniInfo {
    /// `eni-...`.
    pub id: String,
    /// Attachment device index; 0 is the primary ENI.
    pub device_number: u32,
    /// MAC address, lower case, colon separated.
    pub mac: String,
    /// The ENI's own primary address (never given to a pod).
    pub primary_ip: Ipv4Addr,
    /// Its subnet.
    pub subnet_id: String,
    /// Its subnet's CIDR.
    pub subnet_cidr: Ipv4Network,
    /// When the node first saw it (ENIs younger than a minute are never freed).
    pub created_at: Timestamp,
}

impl EniInfo {
    /// True for the primary ENI.
    pub fn is_primary(&self) -> bool {
        self.device_number == 0
    }
}

/// One address held on an ENI for pods (a secondary /32, or one of a delegated /28's 16), and
/// its state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddrSlot {
    /// Free or assigned.
    pub state: SlotState,
    /// When it was last released (`None` = never held). Free addresses are handed out least
    /// recently released first, so an address is reused as late as possible.
    pub released_at: Option<Timestamp>,
    /// The delegated /28 the address belongs to; `None` for a secondary /32. Absent in state
    /// written before prefix delegation existed, which held /32s only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<Ipv4Network>,
}

/// Whether an address is held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotState {
    /// Not held. Until `cooling_until` it must not be handed out: other nodes' kube-proxy and
    /// conntrack may still send the previous pod's traffic to it.
    Free {
        /// End of the cooldown, if one applies.
        cooling_until: Option<Timestamp>,
    },
    /// Held by an attachment.
    Assigned {
        /// The attachment.
        key: AttachmentKey,
        /// For whom.
        pod: PodInfo,
        /// Since when.
        assigned_at: Timestamp,
    },
}

impl AddrSlot {
    /// A never-used free address, secondary (`prefix: None`) or part of `prefix`.
    pub fn fresh(prefix: Option<Ipv4Network>) -> Self {
        AddrSlot {
            state: SlotState::Free {
                cooling_until: None,
            },
            released_at: None,
            prefix,
        }
    }

    /// Held by an attachment.
    pub fn is_assigned(&self) -> bool {
        matches!(self.state, SlotState::Assigned { .. })
    }

    /// Free and out of cooldown at `now`.
    pub fn is_available(&self, now: Timestamp) -> bool {
        matches!(self.state, SlotState::Free { cooling_until } if cooling_until.is_none_or(|t| t <= now))
    }

    /// Free but still cooling at `now`.
    pub fn is_cooling(&self, now: Timestamp) -> bool {
        matches!(self.state, SlotState::Free { cooling_until: Some(t) } if t > now)
    }

    /// The holder, if assigned.
    pub fn holder(&self) -> Option<&AttachmentKey> {
        match &self.state {
            SlotState::Assigned { key, .. } => Some(key),
            SlotState::Free { .. } => None,
        }
    }
}

/// What GC of `network` releases among `held`: the attachments of that network whose
/// (container id, ifname) is not in `valid`, sorted.
pub(crate) fn stale_keys<'a>(
    held: impl Iterator<Item = &'a AttachmentKey>,
    network: &str,
    valid: &HashSet<(String, String)>,
) -> Vec<AttachmentKey> {
    let mut stale: Vec<AttachmentKey> = held
        .filter(|k| {
            k.network == network && !valid.contains(&(k.container_id.clone(), k.ifname.clone()))
        })
        .cloned()
        .collect();
    stale.sort();
    stale
}

/// Each of `keys` released by `release` (keys that held nothing skipped), with the mutations
/// of all the releases.
pub(crate) fn release_each<R>(
    keys: Vec<AttachmentKey>,
    mut release: impl FnMut(&AttachmentKey) -> Option<(R, Vec<crate::Mutation>)>,
) -> (Vec<R>, Vec<crate::Mutation>) {
    let mut released = Vec::new();
    let mut muts = Vec::new();
    for key in keys {
        if let Some((r, m)) = release(&key) {
            released.push(r);
            muts.extend(m);
        }
    }
    (released, muts)
}
