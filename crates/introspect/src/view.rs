//! What ipamd shows: a snapshot of its state, taken under its lock.

use std::collections::BTreeMap;

use pool::{NodeLimits, Pool, PoolMode, Targets, Timestamp};
use serde::{Deserialize, Serialize};

/// What ipamd knows of the Kubernetes cluster, in words (`/v1/pool`'s `Cluster`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// Whether the API server answers, and since when it does not.
    #[serde(rename = "Api")]
    pub api: String,
    /// The node ipamd follows (`MY_NODE_NAME`).
    #[serde(rename = "Node")]
    pub node: Option<String>,
    /// The node's ENIConfig, under custom networking once the node has been read.
    #[serde(rename = "ENIConfig")]
    pub eni_config: Option<String>,
    /// What ipamd waits for, since when and until which deadline, while it waits.
    #[serde(rename = "Waiting")]
    pub waiting: Option<String>,
}

/// A snapshot ipamd builds under its lock; every endpoint and every scrape reads one.
#[derive(Clone, Debug)]
pub struct PoolView {
    /// The address pool.
    pub pool: Pool,
    /// When the snapshot was taken: decides what is cooling.
    pub now: Timestamp,
    /// The limits the pool plans with.
    pub limits: NodeLimits,
    /// The warm-pool targets.
    pub targets: Targets,
    /// When ipamd last gave addresses back (for the release interval).
    pub last_release: Option<Timestamp>,
    /// Pods bound to the node that hold no address yet.
    pub pending: u32,
    /// The node is cordoned and its pool drains.
    pub draining: bool,
    /// A subnet the node draws on is scarce (subnet-scarcity mode).
    pub scarce: bool,
    /// EC2 throttled the node within the last minute ([`pool::PlanContext::congested`]).
    pub congested: bool,
    /// Growth is paused until then after EC2 refused (backoff), if it is.
    pub growth_paused_until: Option<Timestamp>,
    /// Why growth last failed, if it did.
    pub last_error: Option<String>,
    /// ipamd is ready to serve the plugin.
    pub ready: bool,
    /// Why each ENI ipamd created went to its subnet, by ENI id.
    pub placements: BTreeMap<String, String>,
    /// The cluster as ipamd sees it.
    pub cluster: ClusterStatus,
    /// EC2 calls refused for lack of a permission, by API.
    pub refusals: Vec<Ec2Refusal>,
}

/// An EC2 API whose calls were refused for lack of a permission, as ipamd last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ec2Refusal {
    /// The API, e.g. `AssignPrivateIpAddresses`.
    pub api: String,
    /// EC2's error code (`UnauthorizedOperation`, `AuthFailure`).
    pub code: String,
    /// EC2's message of the last refusal.
    pub message: String,
    /// Refusals since ipamd started.
    pub count: u64,
    /// The last one.
    pub last: Timestamp,
}

impl PoolView {
    /// The planner's next step for this snapshot, and why.
    pub fn explain(&self) -> pool::Explained {
        pool::explain(
            &self.pool,
            &self.limits,
            &self.targets,
            pool::PlanContext {
                now: self.now,
                last_release: self.last_release,
                pending: self.pending,
                draining: self.draining,
                scarce: self.scarce,
                congested: self.congested,
            },
        )
    }

    /// Most addresses the node can hold: slots per ENI × ENIs, × 16 with prefix delegation
    /// (the Go CNI's `maxIPsPerENI × maxENI`, `awscni_ip_max`).
    pub fn max_ips(&self) -> u64 {
        let per_slot = if self.targets.prefix_delegation {
            u64::from(pool::ADDRS_PER_PREFIX)
        } else {
            1
        };
        u64::from(self.limits.secondary_ips_per_eni) * u64::from(self.limits.max_enis) * per_slot
    }

    /// Delegated prefixes held, over all ENIs.
    pub fn prefix_count(&self) -> usize {
        self.pool
            .enis()
            .map(|e| self.pool.prefixes(&e.id).count())
            .sum()
    }

    /// The targets' mode by the variable that drives it.
    pub(crate) fn mode_name(&self) -> &'static str {
        match self.targets.mode() {
            PoolMode::WarmEni => "WARM_ENI_TARGET",
            PoolMode::WarmIp => "WARM_IP_TARGET",
            PoolMode::WarmPrefix => "WARM_PREFIX_TARGET",
        }
    }
}

/// Where the endpoints get their snapshots. `view` is called on a blocking thread
/// (`tokio::task::spawn_blocking`), so it may block on a lock.
pub trait Source: Send + Sync + 'static {
    /// A snapshot of ipamd's state now.
    fn view(&self) -> PoolView;
}
