//! The Kubernetes seam. ipamd reads three things from the cluster: its own Node (labels and
//! annotations name the node's ENIConfig and override its settings; a cordon and the startup
//! taint show there too), the pods bound to it, and, with custom networking, the ENIConfig
//! objects. It writes Events and a few fields of its own Node ([`ClusterWrite`]).
//! [`Cluster`] is what it asks; [`KubeCluster`] asks the API server through kube-rs;
//! [`follow`] keeps a [`ClusterView`] up to date from it.
//!
//! The daemon never holds a client: it plans with the latest [`ClusterView`], a plain value,
//! so daemon tests drive it by sending views, and ipamd keeps serving from what it knows while
//! the API server is away.

mod eniconfig;
mod follow;
mod kube_impl;
mod view;
mod write;

use std::collections::BTreeMap;

use futures_util::stream::BoxStream;
use thiserror::Error;

pub use eniconfig::{
    DEFAULT_ENI_CONFIG, EXTERNAL_ENI_CONFIG_LABEL, EniConfigKeys, EniConfigSpec, eni_config_name,
};
pub use follow::follow;
pub use kube_impl::KubeCluster;
pub use view::{ApiState, ClusterView, EniConfigs};
pub use write::{ClusterEvent, ClusterWrite, EventKind, NodePatch, Regarding};

/// A node as ipamd needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// The keys of `spec.taints`, in order.
    pub taints: Vec<String>,
    /// `status.capacity.pods`: the max pods the kubelet reports.
    pub max_pods: Option<u32>,
}

/// A pod bound to the node, as ipamd needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `spec.hostNetwork`: it needs no address.
    pub host_network: bool,
    /// Done (`Succeeded` or `Failed`) or being deleted: it will not ask for an address.
    pub finished: bool,
}

impl PodFacts {
    /// Whether the pod will want an address from ipamd once its sandbox starts.
    pub fn wants_address(&self) -> bool {
        !self.host_network && !self.finished
    }
}

/// The API server could not be asked, or answered with an error.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{what}: {message}")]
pub struct ClusterError {
    /// What was being asked (e.g. `watching node ip-10-0-0-4.ec2.internal`).
    pub what: String,
    /// The client's or the server's message.
    pub message: String,
}

/// What ipamd reads from the cluster, as streams of whole snapshots: each item replaces the
/// previous one. A stream keeps trying after an error (which it yields, so it can be shown)
/// and ends only when dropped.
pub trait Cluster: Send + Sync + 'static {
    /// The node named `name` each time it changes; `None` while it does not exist.
    fn node(&self, name: &str) -> BoxStream<'static, Result<Option<NodeFacts>, ClusterError>>;

    /// Every ENIConfig each time one changes, by name. One whose spec cannot be read is
    /// kept with the reason, so the node naming it is told why.
    fn eni_configs(&self) -> BoxStream<'static, Result<EniConfigs, ClusterError>>;

    /// The pods bound to the node named `node` each time one changes.
    fn pods(&self, node: &str) -> BoxStream<'static, Result<Vec<PodFacts>, ClusterError>>;
}
