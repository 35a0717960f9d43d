//! Deleting the host veths DEL leaves behind. DEL only unroutes a pod: the kernel deletes the
//! veth pair with the pod's namespace, which a runtime removes right after DEL. Where the
//! namespace stays (a runtime that keeps it, a DEL by hand, a plugin that died mid-ADD), the
//! veth would stay too; ipamd deletes every veth of its prefix that has carried no pod route
//! for [`VETH_GRACE`], unless an attachment it holds is named by it: that pod is alive (its
//! ADD is wiring it, or something other than DEL took its route) and keeps its veth.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use pool::Timestamp;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use cloud::{Ec2, Imds};

use super::{Daemon, lock};
use crate::durability::DaemonStore;
use crate::host::{HostNetwork, IdleVeth};

/// How long a veth must carry no route before it is deleted. An ADD creates the veth before
/// it routes the address to it, a few milliseconds later: the grace is far above that, so an
/// ADD in progress never loses its veth.
pub const VETH_GRACE: Duration = Duration::from_secs(3);

/// The veths seen without a route, by index, with when each was first seen so.
#[derive(Debug, Default)]
pub struct IdleSince(BTreeMap<u32, (String, Timestamp)>);

impl IdleSince {
    /// Takes the veths idle now; returns those idle for at least `grace` (forgotten here, as
    /// they are about to be deleted). A veth that got a route, or is gone, is forgotten.
    pub fn observe(
        &mut self,
        idle: Vec<IdleVeth>,
        now: Timestamp,
        grace: Duration,
    ) -> Vec<IdleVeth> {
        let mut seen = BTreeMap::new();
        let mut due = Vec::new();
        for veth in idle {
            let since = self
                .0
                .get(&veth.index)
                .filter(|(name, _)| *name == veth.name)
                .map_or(now, |(_, since)| *since);
            if now.millis().saturating_sub(since.millis()) >= grace.as_millis() as u64 {
                due.push(veth);
            } else {
                seen.insert(veth.index, (veth.name, since));
            }
        }
        self.0 = seen;
        due
    }

    /// True while some veth waits out its grace.
    pub fn waiting(&self) -> bool {
        !self.0.is_empty()
    }
}

/// The sweeper's memory: the veths seen idle, and the signal that a DEL left one behind.
#[derive(Default)]
pub(super) struct VethSweep {
    idle: Mutex<IdleSince>,
    unrouted: Notify,
}

impl VethSweep {
    pub(super) fn idle(&self) -> MutexGuard<'_, IdleSince> {
        lock(&self.idle)
    }

    /// A DEL unrouted a pod (or an address was released): its veth may be left to sweep.
    pub(super) fn notify_unrouted(&self) {
        self.unrouted.notify_one();
    }

    pub(super) async fn unrouted(&self) {
        self.unrouted.notified().await;
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// One sweep: deletes the veths idle for [`VETH_GRACE`]. True while other veths are idle
    /// but not for long enough yet: the caller sweeps again after the grace.
    pub async fn sweep_veths(&self) -> bool {
        let idle = match self.host.idle_veths(&self.node.net.snat.veth_prefix).await {
            Ok(idle) => idle,
            Err(e) => {
                warn!(error = %e, "listing the host veths failed");
                return false;
            }
        };
        let held = self.held_veths();
        let (held_idle, idle): (Vec<_>, Vec<_>) =
            idle.into_iter().partition(|v| held.contains(&v.name));
        for veth in held_idle {
            // Mostly an ADD between creating its veth and routing it: not worth a warning.
            debug!(veth = %veth.name, "the veth of an attachment ipamd holds carries no route; keeping it");
        }
        let (due, waiting) = {
            let mut since = self.veths.idle();
            let due = since.observe(idle, self.clock.now(), VETH_GRACE);
            (due, since.waiting())
        };
        for veth in due {
            match self.host.delete_link(veth.index).await {
                Ok(true) => info!(veth = %veth.name, "deleted a host veth without a pod route"),
                Ok(false) => {}
                Err(e) => warn!(veth = %veth.name, error = %e, "deleting a host veth failed"),
            }
        }
        waiting
    }

    /// The veth names of the attachments ipamd holds, both families.
    fn held_veths(&self) -> BTreeSet<String> {
        let prefix = &self.node.net.snat.veth_prefix;
        let name = |key: &pool::AttachmentKey, pod: &pool::PodInfo| {
            netops::host_veth_name(
                prefix,
                &pod.namespace,
                &pod.name,
                &key.container_id,
                &key.ifname,
            )
        };
        let pool = self.ledger.pool();
        let v4 = pool.allocations().into_iter().map(|a| name(&a.key, &a.pod));
        let v6 = pool
            .v6()
            .allocations()
            .into_iter()
            .map(|a| name(&a.key, &a.pod));
        v4.chain(v6).collect()
    }

    /// Waits until a DEL has unrouted a pod whose veth may outlive it.
    pub async fn pod_unrouted(&self) {
        self.veths.unrouted().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn veth(index: u32, name: &str) -> IdleVeth {
        IdleVeth {
            index,
            name: name.into(),
        }
    }

    const GRACE: Duration = Duration::from_secs(3);

    #[test]
    fn a_veth_is_due_only_after_its_grace_without_a_route() {
        let mut since = IdleSince::default();
        assert!(
            since
                .observe(vec![veth(7, "enia")], Timestamp(1_000), GRACE)
                .is_empty()
        );
        assert!(since.waiting());
        assert!(
            since
                .observe(vec![veth(7, "enia")], Timestamp(3_999), GRACE)
                .is_empty()
        );
        assert_eq!(
            since.observe(vec![veth(7, "enia")], Timestamp(4_000), GRACE),
            [veth(7, "enia")]
        );
        assert!(!since.waiting(), "a due veth is forgotten");
    }

    #[test]
    fn a_veth_that_got_its_route_starts_over() {
        let mut since = IdleSince::default();
        since.observe(vec![veth(7, "enia")], Timestamp(0), GRACE);
        // An ADD routed it.
        since.observe(vec![], Timestamp(1_000), GRACE);
        assert!(!since.waiting());
        assert!(
            since
                .observe(vec![veth(7, "enia")], Timestamp(3_500), GRACE)
                .is_empty()
        );
        assert_eq!(
            since.observe(vec![veth(7, "enia")], Timestamp(6_500), GRACE),
            [veth(7, "enia")]
        );
    }

    #[test]
    fn another_link_at_the_same_index_is_a_new_veth() {
        let mut since = IdleSince::default();
        since.observe(vec![veth(7, "enia")], Timestamp(0), GRACE);
        assert!(
            since
                .observe(vec![veth(7, "enib")], Timestamp(5_000), GRACE)
                .is_empty()
        );
        assert!(since.waiting());
    }

    #[test]
    fn a_clock_that_steps_back_delays_but_never_deletes_early() {
        let mut since = IdleSince::default();
        since.observe(vec![veth(7, "enia")], Timestamp(10_000), GRACE);
        assert!(
            since
                .observe(vec![veth(7, "enia")], Timestamp(2_000), GRACE)
                .is_empty()
        );
    }
}
