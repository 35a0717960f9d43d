use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// What identifies one attachment of a container to a network, as libcni keys its cache
/// (and as the Go CNI keys its datastore): the same key twice is the same attachment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttachmentKey {
    /// The conflist's network name.
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

/// Pod identity from `CNI_ARGS`; any field may be empty (runtimes other than kubelet's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodMeta {
    /// `K8S_POD_NAMESPACE`.
    pub namespace: String,
    /// `K8S_POD_NAME`.
    pub name: String,
    /// `K8S_POD_INFRA_CONTAINER_ID`.
    pub infra_container_id: String,
    /// `K8S_POD_UID`.
    pub uid: String,
}

/// A request from the plugin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Assign an address (idempotent per attachment key).
    Add(AddRequest),
    /// Release the attachment's address into cooldown.
    Del(DelRequest),
    /// Report the attachment's allocation.
    Check(CheckRequest),
    /// Is the daemon ready to serve ADDs?
    Status,
    /// Release every attachment of a network that is not in the valid list.
    Gc(GcRequest),
}

/// ADD.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddRequest {
    /// The attachment.
    pub key: AttachmentKey,
    /// Who it is for.
    pub pod: PodMeta,
    /// `CNI_NETNS`, for logs and introspection.
    pub netns: String,
}

/// Why an address is given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelReason {
    /// The runtime deleted the pod.
    PodDeleted,
    /// The plugin could not wire the pod and hands the address back.
    SetupFailed,
}

/// DEL.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelRequest {
    /// The attachment.
    pub key: AttachmentKey,
    /// Who it was for.
    pub pod: PodMeta,
    /// Why.
    pub reason: DelReason,
}

/// CHECK.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRequest {
    /// The attachment.
    pub key: AttachmentKey,
}

/// One attachment the runtime still considers live.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ValidAttachment {
    /// `containerID`.
    pub container_id: String,
    /// `ifname`.
    pub ifname: String,
}

/// GC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcRequest {
    /// Only attachments of this network are considered.
    pub network: String,
    /// Attachments to keep.
    pub valid: Vec<ValidAttachment>,
}

/// An address held by an attachment and where it lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The attachment.
    pub key: AttachmentKey,
    /// Who holds it.
    pub pod: PodMeta,
    /// The pod's IPv4 address; `None` for an IPv6-only pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Ipv4Addr>,
    /// The pod's IPv6 address (from a /80 prefix on the primary ENI); `None` for an IPv4-only
    /// pod. IPv6 traffic always uses the main table: `route_table` and `device_number`
    /// describe where the IPv4 address lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
    /// A node-local IPv4 address (169.254.172.0/22) through which an IPv6 pod reaches IPv4
    /// destinations, SNATed to the node's address (IPv4 egress, IPv6 mode only). Not a pod IP:
    /// the plugin wires it but leaves it out of the CNI result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_ipv4: Option<Ipv4Addr>,
    /// The ENI it is a secondary address of.
    pub eni_id: String,
    /// The ENI's device number (0 = primary ENI).
    pub device_number: u32,
    /// Routing table for traffic from the pod: 254 (main) on the primary ENI, else device
    /// number + 1 (`netops::eni_table` decides; this crate depends on no other).
    pub route_table: u32,
}

impl Allocation {
    /// The pod's addresses, for logs and error messages.
    pub fn addresses(&self) -> PodAddresses {
        PodAddresses {
            ipv4: self.ip,
            ipv6: self.ipv6,
        }
    }
}

/// The addresses of one pod, either or both families. Displays as `10.0.0.9`, `2001:db8::5`,
/// `10.0.0.9 2001:db8::5`, or `no address` when the allocation carries none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodAddresses {
    /// IPv4 address.
    pub ipv4: Option<Ipv4Addr>,
    /// IPv6 address.
    pub ipv6: Option<Ipv6Addr>,
}

impl PodAddresses {
    /// True when neither family has an address: nothing can be wired.
    pub fn is_empty(&self) -> bool {
        self.ipv4.is_none() && self.ipv6.is_none()
    }
}

impl fmt::Display for PodAddresses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.ipv4, self.ipv6) {
            (Some(v4), Some(v6)) => write!(f, "{v4} {v6}"),
            (Some(v4), None) => write!(f, "{v4}"),
            (None, Some(v6)) => write!(f, "{v6}"),
            (None, None) => f.write_str("no address"),
        }
    }
}

/// A successful reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Reply {
    /// To ADD.
    Add(AddReply),
    /// To DEL.
    Del(DelReply),
    /// To CHECK.
    Check(CheckReply),
    /// To STATUS.
    Status(StatusReply),
    /// To GC.
    Gc(GcReply),
}

/// The address assigned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddReply {
    /// The allocation (the existing one when the same attachment was added before).
    pub allocation: Allocation,
    /// The attachment held this address before this ADD (a repeated ADD). The plugin must not
    /// hand such an address back when its wiring fails: a pod may be using it.
    #[serde(default)]
    pub existing: bool,
}

/// What was released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelReply {
    /// `None` when ipamd held nothing for the attachment: DEL is idempotent.
    pub released: Option<Allocation>,
}

/// The attachment's allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReply {
    /// What ipamd holds for it.
    pub allocation: Allocation,
}

/// Address counts of the pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolCounts {
    /// Addresses held on the node's ENIs for pods.
    pub total: u32,
    /// Held by attachments.
    pub assigned: u32,
    /// Released less than the cooldown period ago.
    pub cooling: u32,
    /// Free now: neither assigned nor cooling.
    pub available: u32,
}

/// STATUS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReply {
    /// Ready to serve an ADD now or after growing the pool.
    pub ready: bool,
    /// Why not, when not ready.
    pub reason: Option<String>,
    /// Counts.
    pub pool: PoolCounts,
}

/// GC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReply {
    /// Allocations released because their attachment was not valid.
    pub released: Vec<Allocation>,
}

/// Error classes the plugin maps to CNI codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request's protocol version is not the daemon's.
    VersionMismatch,
    /// The request could not be decoded or is invalid.
    BadRequest,
    /// The caller is not allowed (not uid 0).
    Forbidden,
    /// The daemon is still starting.
    NotReady,
    /// No address can be assigned now; the message says why.
    NoAddresses,
    /// ipamd holds nothing for this attachment.
    UnknownAttachment,
    /// Anything else (persistence failed, ...).
    Internal,
    /// A kind this build does not know (sent by a newer daemon).
    #[serde(other)]
    Unknown,
}

/// Why an ADD found no address: what the pod's Event names as its action, and what a caller
/// that counts failures reads instead of the message's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NoAddressCause {
    /// Every free address is cooling down after its release.
    AddressesCooling,
    /// The node holds all the ENIs it may.
    EniLimit,
    /// The node gives addresses to as many pods as it may hold.
    MaxPods,
    /// The node is cordoned and ipamd does not grow its pool there.
    NodeCordoned,
    /// No subnet can take a new ENI (custom networking or subnet discovery says why).
    NoSubnetForEni,
    /// The pool is at its warm targets and does not grow.
    AtTargets,
    /// Growth is paused after a failure.
    GrowthPaused,
    /// The pool is growing; the ADD gave up waiting for it.
    PoolGrowing,
    /// EC2 says the subnet is full.
    SubnetExhausted,
    /// EC2 throttled ipamd's calls, or was overloaded.
    Ec2Throttling,
    /// ipamd's role may not make a call growth needs.
    #[serde(rename = "MissingIAMPermissions")]
    MissingIamPermissions,
    /// Any other EC2 failure.
    Ec2Error,
    /// A cause this build does not know (sent by a newer daemon).
    #[serde(other)]
    Unknown,
}

impl NoAddressCause {
    /// The name, as Events carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            NoAddressCause::AddressesCooling => "AddressesCooling",
            NoAddressCause::EniLimit => "EniLimit",
            NoAddressCause::MaxPods => "MaxPods",
            NoAddressCause::NodeCordoned => "NodeCordoned",
            NoAddressCause::NoSubnetForEni => "NoSubnetForEni",
            NoAddressCause::AtTargets => "AtTargets",
            NoAddressCause::GrowthPaused => "GrowthPaused",
            NoAddressCause::PoolGrowing => "PoolGrowing",
            NoAddressCause::SubnetExhausted => "SubnetExhausted",
            NoAddressCause::Ec2Throttling => "Ec2Throttling",
            NoAddressCause::MissingIamPermissions => "MissingIAMPermissions",
            NoAddressCause::Ec2Error => "Ec2Error",
            NoAddressCause::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for NoAddressCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct DaemonError {
    /// Class.
    pub kind: ErrorKind,
    /// Human-readable reason, meant to reach the operator through the CNI error.
    pub message: String,
    /// With [`ErrorKind::NoAddresses`]: why. Absent from older daemons' replies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<NoAddressCause>,
}

impl DaemonError {
    /// Builds an error reply.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            cause: None,
        }
    }

    /// The reply of an ADD that found no address, for `cause`.
    pub fn no_addresses(cause: NoAddressCause, message: impl Into<String>) -> Self {
        Self {
            cause: Some(cause),
            ..Self::new(ErrorKind::NoAddresses, message)
        }
    }
}
