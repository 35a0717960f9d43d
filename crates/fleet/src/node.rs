//! What every simulated node shares, whichever algorithm runs it: the pods the scheduler binds
//! to it, the kubelet's way of calling the CNI for each (a sandbox a moment after binding, a
//! failed one retried [`KUBELET_RETRY`] to half as much again later), and what is recorded of
//! each pod.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use vpc_sim::inproc::Account;
use vpc_sim::rand::Rng;

/// From binding to the sandbox's ADD: the kubelet sees the pod, pulls nothing (the image is
/// there) and starts the sandbox.
pub const SANDBOX_DELAY: Duration = Duration::from_millis(800);

/// The kubelet's `backOffPeriod`: a pod whose sandbox failed is synced again this much later,
/// plus a jitter of up to half of it (`wait.Jitter(backOffPeriod, 0.5)`, pod_workers.go).
pub const KUBELET_RETRY: Duration = Duration::from_secs(10);
/// That jitter's factor.
pub const KUBELET_JITTER: f64 = 0.5;

/// One pod's life on its node.
#[derive(Clone, Debug, Default)]
pub struct PodRecord {
    /// When its owner created it (since the start), with its node or, replacing a pod, as
    /// that one went. The scheduler binds it once the node's CNI has started.
    pub created_at: Duration,
    /// When its ADD succeeded, if it did.
    pub placed_at: Option<Duration>,
    /// The address that ADD gave it.
    pub address: Option<Ipv4Addr>,
    /// ADDs that failed.
    pub failed_adds: u32,
    /// Of those, ADDs that failed while the node's last EC2 answer was `RequestLimitExceeded`.
    pub throttled_adds: u32,
}

/// Every pod of every node, as recorded.
#[derive(Clone, Default)]
pub struct Records(Arc<Mutex<Vec<PodRecord>>>);

impl Records {
    /// Records a pod created at `at`; returns its index.
    pub fn created(&self, at: Duration) -> usize {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.push(PodRecord {
            created_at: at,
            ..Default::default()
        });
        all.len() - 1
    }

    /// Changes the record of pod `i`.
    pub fn update(&self, i: usize, f: impl FnOnce(&mut PodRecord)) {
        if let Some(r) = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(i)
        {
            f(r);
        }
    }

    /// Every record.
    pub fn all(&self) -> Vec<PodRecord> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// How an ADD ended.
pub enum AddOutcome {
    /// The pod has an address (this one, when IPv4).
    Placed(Option<Ipv4Addr>),
    /// It failed; `throttled` when EC2 throttling is the cause the node gives.
    Failed {
        /// The cause is EC2 throttling.
        throttled: bool,
    },
}

/// A node's CNI, as the kubelet drives it.
pub trait Cni: Send + Sync + 'static {
    /// The pod `name` is bound to the node (its sandbox does not exist yet).
    fn bound(&self, _name: &str) {}

    /// ADD for pod `name`.
    fn add(&self, name: &str) -> impl std::future::Future<Output = AddOutcome> + Send;

    /// DEL for pod `name` (deleted by its owner).
    fn del(&self, name: &str) -> impl std::future::Future<Output = ()> + Send;

    /// Addresses the node holds and no pod uses.
    fn idle(&self) -> u32;
}

/// The kubelet's handling of one pod: ADD after [`SANDBOX_DELAY`], again 10 to 15 s later
/// ([`KUBELET_RETRY`] jittered by `jitter`) while it fails, until it succeeds or `until`
/// passes; then, if `lifetime` is set, DEL once it has run that long. Returns whether the pod
/// ran.
pub async fn run_pod<C: Cni>(
    cni: &C,
    account: &Account,
    records: &Records,
    (name, created): (&str, Duration),
    until: Duration,
    lifetime: Option<Duration>,
    jitter: &mut Rng,
) -> bool {
    let i = records.created(created);
    cni.bound(name);
    tokio::time::sleep(SANDBOX_DELAY).await;
    loop {
        match cni.add(name).await {
            AddOutcome::Placed(address) => {
                records.update(i, |r| {
                    r.placed_at = Some(account.elapsed());
                    r.address = address;
                });
                break;
            }
            AddOutcome::Failed { throttled } => records.update(i, |r| {
                r.failed_adds += 1;
                r.throttled_adds += u32::from(throttled);
            }),
        }
        let retry = KUBELET_RETRY.mul_f64(1.0 + KUBELET_JITTER * jitter.unit());
        if account.elapsed() + retry >= until {
            return false;
        }
        tokio::time::sleep(retry).await;
    }
    if let Some(lifetime) = lifetime {
        tokio::time::sleep(lifetime).await;
        cni.del(name).await;
    }
    true
}
