//! What the cluster changes in how the pool is run: the node's own settings, a cordon, the
//! pods bound to the node that have no address yet, and what ipamd tells the cluster back
//! (Events, the node's real capacity, readiness).

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use cloud::{Ec2, Imds};
use cluster::{ClusterEvent, ClusterView, EventKind, PodFacts, Regarding};
use pool::{NodeLimits, Targets};
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use super::overrides::{Overrides, Rejected};
use super::waits::Waiting;
use super::{Daemon, lock};
use crate::durability::DaemonStore;
use crate::host::HostNetwork;

/// The cluster as ipamd follows it, and what ipamd keeps of its dealings with it: the view
/// (kept current by the caller), what custom networking waits for, the node settings already
/// reported as rejected, and where Events go.
pub(super) struct Steering {
    view: watch::Receiver<ClusterView>,
    waiting: Mutex<Option<Waiting>>,
    rejected: Mutex<Vec<Rejected>>,
    events: Option<mpsc::Sender<ClusterEvent>>,
}

impl Steering {
    pub(super) fn new(
        view: watch::Receiver<ClusterView>,
        events: Option<mpsc::Sender<ClusterEvent>>,
    ) -> Self {
        Steering {
            view,
            waiting: Mutex::new(None),
            rejected: Mutex::new(Vec::new()),
            events,
        }
    }

    /// The latest view. Never held across an await, nor while taking the pool's lock.
    pub(super) fn view(&self) -> watch::Ref<'_, ClusterView> {
        self.view.borrow()
    }

    /// The view, to be told when it changes.
    pub(super) fn subscribe(&self) -> watch::Receiver<ClusterView> {
        self.view.clone()
    }

    pub(super) fn waiting(&self) -> MutexGuard<'_, Option<Waiting>> {
        lock(&self.waiting)
    }

    /// Of `rejected` (the settings the node has wrong now), those not reported yet.
    fn newly_rejected(&self, rejected: Vec<Rejected>) -> Vec<Rejected> {
        let mut seen = lock(&self.rejected);
        let new = rejected
            .iter()
            .filter(|r| !seen.contains(r))
            .cloned()
            .collect();
        *seen = rejected;
        new
    }

    /// Hands an Event to whoever records them; dropped, with a log line, when nobody does or
    /// the queue is full (the API server is away and Events pile up).
    pub(super) fn emit(&self, event: ClusterEvent) {
        let Some(events) = &self.events else {
            return;
        };
        if let Err(e) = events.try_send(event) {
            debug!(error = %e, "an Event was not queued");
        }
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// The node's own settings, from the latest view of it.
    fn overrides(&self) -> Overrides {
        self.steering
            .view()
            .node
            .as_ref()
            .map(Overrides::of)
            .unwrap_or_default()
    }

    /// The warm-pool targets in force: the environment's, with the node's over them, and
    /// one warm address only while a subnet is scarce.
    pub fn targets(&self) -> Targets {
        let targets = self.overrides().targets(self.node.targets);
        if self.subnet_scarce() {
            super::scarcity::scarce_targets(targets)
        } else {
            targets
        }
    }

    /// The limits the pool plans with now: ENIs someone else manages take ENI slots, and the
    /// node may lower MAX_ENI.
    pub fn limits(&self) -> NodeLimits {
        let unmanaged = self.growth.unmanaged().len() as u32;
        let max_enis = self
            .overrides()
            .max_enis(self.node.instance.max_enis, self.node.max_enis);
        NodeLimits {
            max_enis: max_enis.saturating_sub(unmanaged).max(1),
            ..self.node.limits
        }
    }

    /// The node is cordoned and ipamd may not manage ENIs there: no new ENI, and the warm
    /// addresses go back.
    pub fn draining(&self) -> bool {
        !self.node.manage_enis_non_schedulable
            && self
                .steering
                .view()
                .node
                .as_ref()
                .is_some_and(|n| n.unschedulable)
    }

    /// Pods bound to the node that will ask for an address and hold none yet (IPv4: the only
    /// pool that grows by demand).
    pub fn pending_pods(&self) -> u32 {
        if !self.node.ip_family.has_v4() {
            return 0;
        }
        let Some(pods) = self.steering.view().pods.clone() else {
            return 0;
        };
        let pool = self.ledger.pool();
        let held: HashSet<(String, String)> = pool
            .allocations()
            .into_iter()
            .map(|a| (a.pod.namespace, a.pod.name))
            .collect();
        pods.iter()
            .filter(|p| p.wants_address() && !held.contains(&(p.namespace.clone(), p.name.clone())))
            .count() as u32
    }

    /// How many pods the node can give an address to: every ENI it may hold (fewer those
    /// someone else manages, and the primary under custom networking), each slot an address
    /// or a /28 (an address where EC2 refuses prefixes, see `prefix_capacity`). `None` in
    /// IPv6 mode, where a /80 leaves no limit to publish.
    pub fn capacity(&self) -> Option<u32> {
        if !self.node.ip_family.has_v4() {
            return None;
        }
        let limits = self.limits();
        let enis = limits
            .max_enis
            .saturating_sub(u32::from(self.node.custom_networking));
        if self.node.targets.prefix_delegation {
            return Some(self.prefix_capacity(enis, limits.secondary_ips_per_eni));
        }
        Some(enis.saturating_mul(limits.secondary_ips_per_eni))
    }

    /// Addresses a pod could be given now (in IPv6 mode, whether a /80 is delegated).
    pub fn free_addresses(&self) -> u32 {
        let now = self.clock.now();
        let pool = self.ledger.pool();
        if self.node.ip_family.has_v4() {
            pool.counts(now).available
        } else if pool.v6().counts(now).prefixes > 0 {
            u32::MAX
        } else {
            0
        }
    }

    /// The object Events about ipamd itself go to: its pod, else its node.
    pub(super) fn own_object(&self) -> Option<Regarding> {
        if let Some((namespace, name)) = &self.node.own_pod {
            return Some(Regarding::Pod {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: String::new(),
            });
        }
        self.steering
            .view()
            .node_name
            .clone()
            .map(|name| Regarding::Node { name })
    }

    /// A pod's uid, from the ADD when the runtime passed it, else from the pods ipamd follows.
    pub(super) fn pod_uid(&self, namespace: &str, name: &str, given: &str) -> String {
        if !given.is_empty() {
            return given.to_string();
        }
        let view = self.steering.view();
        view.pods
            .iter()
            .flatten()
            .find(|p: &&PodFacts| p.namespace == namespace && p.name == name)
            .map(|p| p.uid.clone())
            .unwrap_or_default()
    }

    /// Tells the node's owner, once per value, which of its settings were not taken.
    pub(super) fn report_rejected_settings(&self) {
        let rejected = self.overrides().rejected;
        let new = self.steering.newly_rejected(rejected);
        let Some(node) = self.steering.view().node_name.clone() else {
            return;
        };
        for r in new {
            warn!(key = %r.key, value = %r.value, problem = %r.problem, "a node setting was not taken; the environment's value stays");
            self.steering.emit(ClusterEvent {
                regarding: Regarding::Node { name: node.clone() },
                kind: EventKind::Warning,
                reason: "InvalidSetting".into(),
                action: r.key.replace(super::overrides::PREFIX, ""),
                note: format!(
                    "{}={:?} was not taken ({}); the environment's value stays",
                    r.key, r.value, r.problem
                ),
            });
        }
    }
}
