//! The shared state every server reads: the model, the clock, the IMDS lag and freeze, the EC2
//! fault plan and IAM policy, and whatever must follow the model's changes (the fabric in fabric
//! mode).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::clock::Clock;
use crate::fabric::{Fabric, FabricError, Runner};
use crate::faults::{Decision, FaultError, FaultReport, Faults, Injector};
use crate::iam::{Iam, IamError, IamPolicy, IamReport};
use crate::imds::freeze::{FreezeReport, Frozen};
use crate::model::{InstanceView, Model};

/// Something that must reflect every change of the model before EC2 answers (in fabric mode,
/// the VPC's links and delivery routes).
pub trait Follower: Send {
    /// Brings the follower in line with `model`.
    fn follow(&mut self, model: &Model) -> Result<(), FabricError>;
}

impl<R: Runner + Send> Follower for Fabric<R> {
    fn follow(&mut self, model: &Model) -> Result<(), FabricError> {
        self.sync(model).map(|_| ())
    }
}

/// A follower shared between the EC2 server and whoever tears it down.
pub type SharedFollower = Arc<Mutex<dyn Follower>>;

/// One simulator: the model behind a lock, the clock that stamps changes, the IMDS lag and
/// freeze, the fault injector, the IAM policy, and an optional follower.
pub struct Sim {
    model: Mutex<Model>,
    clock: Arc<dyn Clock>,
    imds_lag_ms: u64,
    attach_latency_ms: u64,
    follower: Option<SharedFollower>,
    calls: Mutex<BTreeMap<String, u64>>,
    faults: Mutex<Injector>,
    iam: Mutex<Iam>,
    imds_frozen: Mutex<Option<Frozen>>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("model", &self.model)
            .field("clock", &self.clock)
            .field("imds_lag_ms", &self.imds_lag_ms)
            .field("attach_latency_ms", &self.attach_latency_ms)
            .field("follower", &self.follower.is_some())
            .field("calls", &self.calls)
            .field("faults", &self.faults)
            .field("iam", &self.iam)
            .field("imds_frozen", &self.imds_frozen)
            .finish()
    }
}

impl Sim {
    /// Wraps a model.
    pub fn new(model: Model, clock: Arc<dyn Clock>, imds_lag_ms: u64) -> Self {
        Self {
            model: Mutex::new(model),
            clock,
            imds_lag_ms,
            attach_latency_ms: 0,
            follower: None,
            calls: Mutex::default(),
            faults: Mutex::default(),
            iam: Mutex::default(),
            imds_frozen: Mutex::default(),
        }
    }

    /// AttachNetworkInterface answers (and the device appears) only after `ms`: EC2 takes
    /// seconds to attach, which is what a cold ADD waits for.
    pub fn with_attach_latency(mut self, ms: u64) -> Self {
        self.attach_latency_ms = ms;
        self
    }

    /// The emulated attach latency.
    pub fn attach_latency_ms(&self) -> u64 {
        self.attach_latency_ms
    }

    /// Adds a follower: after each successful EC2 change it is brought in line with the model
    /// before the reply; if it cannot be, the change is rolled back and EC2 answers
    /// `InternalError`.
    pub fn with_follower(mut self, follower: SharedFollower) -> Self {
        self.follower = Some(follower);
        self
    }

    /// The follower, if any.
    pub fn follower(&self) -> Option<&SharedFollower> {
        self.follower.as_ref()
    }

    /// Locks the model. A handler that panicked while holding the lock cannot have left a
    /// half-applied change (operations validate before they mutate), so a poisoned lock is
    /// taken over rather than failing every later request.
    pub fn model(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Now, ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// How long IMDS lags behind EC2.
    pub fn imds_lag_ms(&self) -> u64 {
        self.imds_lag_ms
    }

    /// What `instance_id`'s IMDS shows at `now_ms`: the lagged view of the model, or, while
    /// IMDS is frozen, the view it showed when it was frozen. `None` for an unknown instance.
    pub fn imds_view(&self, instance_id: &str, now_ms: u64) -> Option<InstanceView> {
        // Lock order: the freeze before the model (as in `set_imds_frozen`), never the reverse.
        if let Some(frozen) = self.frozen().as_ref() {
            return frozen.views.get(instance_id).cloned();
        }
        self.model()
            .imds_view(instance_id, now_ms, self.imds_lag_ms)
    }

    /// Freezes every instance's IMDS as it is now, or unfreezes it. Freezing a frozen IMDS keeps
    /// the first picture: a repeated request must not quietly move the moment a test relies on.
    pub fn set_imds_frozen(&self, frozen: bool) {
        let mut slot = self.frozen();
        match (frozen, slot.is_some()) {
            (true, false) => {
                *slot = Some(Frozen::take(&self.model(), self.now_ms(), self.imds_lag_ms))
            }
            (false, true) => *slot = None,
            _ => {}
        }
    }

    /// Whether IMDS is frozen, since when, and its lag.
    pub fn imds_report(&self) -> FreezeReport {
        let at = self.frozen().as_ref().map(|f| f.at_ms);
        FreezeReport {
            frozen: at.is_some(),
            frozen_at_ms: at,
            lag_ms: self.imds_lag_ms,
        }
    }

    fn frozen(&self) -> MutexGuard<'_, Option<Frozen>> {
        // Replaced whole or not at all: a panic cannot leave it half-written.
        self.imds_frozen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one EC2 request for `action`, answered, refused or faulted (injected faults are
    /// counted here too): benchmarks and tests count what a client asked of EC2 here,
    /// independently of what the client reports itself.
    pub fn record_call(&self, action: &str) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        *calls.entry(action.to_string()).or_default() += 1;
    }

    /// Replaces the EC2 fault plan (see [`crate::faults`]); a bad plan changes nothing.
    pub fn set_faults(&self, plan: Faults) -> Result<(), FaultError> {
        self.injector().set(plan)
    }

    /// The fault plan in force and what it injected so far.
    pub fn fault_report(&self) -> FaultReport {
        self.injector().report()
    }

    /// Decides (and counts) the faults of one EC2 call of `action`.
    pub fn decide_fault(&self, action: &str) -> Decision {
        self.injector().decide(action)
    }

    /// A request id for a faulted call, drawn from the injector so that the model (and the ids
    /// it hands out next) stays exactly as if the call had never come.
    pub fn fault_request_hex(&self) -> String {
        self.injector().random_hex(32)
    }

    /// Replaces the IAM policy (see [`crate::iam`]); a bad policy changes nothing.
    pub fn set_iam(&self, policy: IamPolicy) -> Result<(), IamError> {
        self.iam().set(policy)
    }

    /// The IAM policy in force and the calls it denied so far.
    pub fn iam_report(&self) -> IamReport {
        self.iam().report()
    }

    /// Whether the IAM policy denies this call of `action`; a denial is counted.
    pub fn iam_denies(&self, action: &str) -> bool {
        self.iam().check(action)
    }

    /// A request id for a denied call, drawn outside the model like a faulted call's.
    pub fn iam_request_hex(&self) -> String {
        self.iam().random_hex(32)
    }

    fn iam(&self) -> MutexGuard<'_, Iam> {
        // Nothing in it can be left half-updated by a panic.
        self.iam.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn injector(&self) -> MutexGuard<'_, Injector> {
        // Nothing in the injector can be left half-updated by a panic.
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// EC2 requests so far, by action.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
