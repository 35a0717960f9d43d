//! What ipamd knows of the cluster at one moment: a plain value the daemon plans with.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::{EniConfigKeys, EniConfigSpec, NodeFacts, PodFacts, eni_config_name};

/// Every ENIConfig by name: its spec, or why it cannot be used.
pub type EniConfigs = BTreeMap<String, Result<EniConfigSpec, String>>;

/// Whether the API server answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiState {
    /// ipamd has no cluster to talk to (no node name or no client configuration).
    NotConfigured(String),
    /// Nothing has been heard yet.
    Connecting {
        /// Since when.
        since: SystemTime,
    },
    /// The last request was answered.
    Connected,
    /// The last request failed; earlier answers are still used.
    Failing {
        /// The failure.
        error: String,
        /// Since when it fails.
        since: SystemTime,
    },
}

/// The cluster as ipamd last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    /// Whether the API server answers.
    pub api: ApiState,
    /// The node's name (`MY_NODE_NAME`), when ipamd has one.
    pub node_name: Option<String>,
    /// The node, once read; `None` before that or while it does not exist.
    pub node: Option<NodeFacts>,
    /// The ENIConfigs, once listed (only read with custom networking).
    pub eni_configs: Option<EniConfigs>,
    /// Why the ENIConfigs cannot be listed now, if they cannot (the CRD is not installed, say).
    pub eni_configs_error: Option<String>,
    /// The pods bound to the node, once listed.
    pub pods: Option<Vec<PodFacts>>,
}

impl ClusterView {
    /// A view without a cluster, saying why.
    pub fn not_configured(why: impl Into<String>) -> Self {
        ClusterView {
            api: ApiState::NotConfigured(why.into()),
            node_name: None,
            node: None,
            eni_configs: None,
            eni_configs_error: None,
            pods: None,
        }
    }

    /// The name of the node's ENIConfig, once the node has been read.
    pub fn eni_config_name(&self, keys: &EniConfigKeys) -> Option<String> {
        self.node.as_ref().map(|n| eni_config_name(n, keys))
    }
}
