//! The daemon: what the node is ([`Node`]), and the parts that each own one concern's state
//! (the pool and its store, growth, subnet scarcity, the veth sweep, ENI placement, the
//! cluster). How it starts is in `startup`, what runs in the background in `run`; requests,
//! growth, shrinking and reconciliation live in the other submodules.

mod eni;
mod grow;
mod growth;
mod leaks;
mod ledger;
mod migrate;
mod overrides;
mod placement;
mod prefix_fallback;
mod reconcile;
mod recover;
mod requests;
mod run;
mod scarcity;
mod shrink;
mod startup;
mod steer;
mod v6;
mod veths;
mod waits;

pub use eni::{TAG_CLUSTER, TAG_CREATED_AT, TAG_INSTANCE_ID};
pub use leaks::{LeakReport, MAX_START_JITTER, MIN_LEAK_AGE};
pub use overrides::{KEYS as NODE_SETTING_KEYS, PREFIX as NODE_SETTING_PREFIX};
pub use placement::{NoPlacement, Placement, SUBNET_CLUSTER_TAG_PREFIX, SUBNET_ROLE_TAG};
pub use recover::{DEAD_POD_GRACE, LostState, RECOVERED_NETWORK};
pub use run::{Endpoint, Publish, Tasks};
pub use scarcity::CHECK_PERIOD as SCARCITY_CHECK_PERIOD;
pub use startup::{Parts, STEPS, StartupError, Step, node_net};
pub use veths::VETH_GRACE;
pub use waits::{STAGE_DEADLINE, Stage};

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cloud::{Ec2, Imds, InstanceLimits, NodeIdentity};
use introspect::{Metrics, PoolView};
use pool::{Clock, NodeLimits, Pool, Targets};
use tracing::info;

use crate::config::IpFamily;
use crate::durability::DaemonStore;
pub use crate::durability::PersistError;
use crate::host::{HostNetwork, NodeNet};
use growth::Growth;
use ledger::Ledger;
use placement::Placements;
use scarcity::Scarcity;
use steer::Steering;
use veths::VethSweep;

/// kubelet's default `--max-pods`, the cap with prefix delegation when MAX_PODS is unset.
pub const KUBELET_DEFAULT_MAX_PODS: u32 = 110;

/// What the node is, fixed at startup.
#[derive(Clone, Debug)]
pub struct Node {
    /// IMDS identity.
    pub identity: NodeIdentity,
    /// Instance limits (from the table or EC2).
    pub instance: InstanceLimits,
    /// Node-wide network settings.
    pub net: NodeNet,
    /// The warm-pool targets.
    pub targets: Targets,
    /// ENIs the node may hold at most: the instance's limit under MAX_ENI.
    pub max_enis: u32,
    /// The planning limits before the node's own MAX_ENI and the ENIs ipamd does not manage
    /// ([`Daemon::limits`] applies both).
    pub limits: NodeLimits,
    /// CLUSTER_NAME: tags new ENIs and scopes leaked-ENI cleanup.
    pub cluster_name: Option<String>,
    /// ADDITIONAL_ENI_TAGS.
    pub extra_tags: Vec<(String, String)>,
    /// How long an ADD that finds no address waits for the pool to grow.
    pub add_wait: Duration,
    /// AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG.
    pub custom_networking: bool,
    /// The node keys naming its ENIConfig.
    pub eni_config_keys: cluster::EniConfigKeys,
    /// ENABLE_SUBNET_DISCOVERY.
    pub subnet_discovery: bool,
    /// ENABLE_IPv4 and ENABLE_IPv6.
    pub ip_family: IpFamily,
    /// AWS_MANAGE_ENIS_NON_SCHEDULABLE.
    pub manage_enis_non_schedulable: bool,
    /// The pod ipamd runs in (namespace, name), when it knows.
    pub own_pod: Option<(String, String)>,
    /// SUBNET_SCARCITY_MODE.
    pub scarcity_mode: bool,
}

/// The running daemon, generic over its seams: EC2, IMDS, the node's network and the store.
/// Each concern owns its state in a part of its own; a new concern adds a part.
pub struct Daemon<E, I, H, S> {
    ec2: E,
    imds: I,
    host: H,
    clock: Arc<dyn Clock>,
    node: Node,
    metrics: Arc<Metrics>,
    /// The pool and the store behind it.
    ledger: Ledger<S>,
    growth: Growth,
    scarcity: Scarcity,
    veths: VethSweep,
    placements: Placements,
    /// The cluster and what ipamd tells it.
    steering: Steering,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere does not make the data useless: the pool's operations check before
    // they change anything, and the small values beside it are replaced whole.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// The node.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The cluster as ipamd sees it, to be told when it changes.
    pub fn cluster_view(&self) -> tokio::sync::watch::Receiver<cluster::ClusterView> {
        self.steering.subscribe()
    }

    /// A snapshot of the pool (for tests).
    pub fn pool_snapshot(&self) -> Pool {
        self.ledger.pool().clone()
    }

    /// The counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// A snapshot of everything introspection and metrics show.
    pub fn view(&self) -> PoolView {
        let now = self.clock.now();
        let ready = self.not_ready(now).is_none();
        let growth = self.growth.status().clone();
        let (limits, targets) = (self.limits(), self.targets());
        let (pending, draining) = (self.pending_pods(), self.draining());
        PoolView {
            pool: self.ledger.pool().clone(),
            now,
            limits,
            targets,
            last_release: growth.last_release,
            pending,
            draining,
            scarce: self.subnet_scarce(),
            congested: self.congested(),
            growth_paused_until: growth.paused_until.filter(|u| now < *u),
            last_error: growth.last_error.map(|e| e.to_string()),
            ready,
            placements: self.placements.chosen().clone(),
            cluster: self.cluster_status(),
            refusals: self.metrics.ec2_refusals(),
        }
    }

    /// Waits until something asks the controller to run early (an ADD, a DEL, or an ADD
    /// that found no address).
    pub async fn kicked(&self) {
        self.growth.kicked().await;
    }

    /// Makes everything applied durable (at shutdown).
    pub async fn flush(&self) -> Result<(), PersistError> {
        self.ledger.flush().await
    }

    fn log_pool_stats(&self) {
        let (c, prefixes) = {
            let pool = self.ledger.pool();
            let prefixes: usize = pool.enis().map(|e| pool.prefixes(&e.id).count()).sum();
            (pool.counts(self.clock.now()), prefixes)
        };
        // Worded as the Go CNI's lines so operators' greps keep working. Every ENI is on
        // network card 0: multi-card instances are not managed.
        let kind = if self.node.targets.prefix_delegation {
            "Prefix"
        } else {
            "IP"
        };
        info!(
            "{kind} pool stats for network card 0: Total IPs/Prefixes = {}/{}, AssignedIPs/CooldownIPs: {}/{}, c.maxIPsPerENI = {}",
            c.total,
            prefixes,
            c.assigned,
            c.cooling,
            self.limits().secondary_ips_per_eni
        );
    }
}

fn log_changes(what: &str, changes: &[String]) {
    if changes.is_empty() {
        info!("{what}: already in place");
    } else {
        info!("{what}: {}", changes.join("; "));
    }
}
