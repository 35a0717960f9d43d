//! The account: the model behind a lock, and what EC2 does to a call before the model sees it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cloud::throttle::TokenBucket;
use cloud::{Action, CloudError, CloudErrorKind, NetworkInterface};
use tokio::time::Instant;

use super::convert::interface;
use super::options::{Buckets, Options};
use crate::ec2::Ec2Error;
use crate::ec2::inject;
use crate::faults::{FaultError, FaultReport, Faults, Injector, Outcome};
use crate::iam::{Iam, IamError, IamPolicy, IamReport};
use crate::model::{Fragment, FragmentReport, Model, ModelError};

/// What EC2 answered over the run.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Requests by action that reached EC2's rate check, refused ones included.
    pub calls: BTreeMap<Action, u64>,
    /// Requests refused with `RequestLimitExceeded` (a storm or an empty bucket).
    pub throttled: u64,
}

impl Tally {
    /// Every request.
    pub fn total(&self) -> u64 {
        self.calls.values().sum()
    }
}

struct Inner {
    model: Model,
    buckets: HashMap<Action, TokenBucket>,
    /// EC2 refuses every call between these times (a throttling storm caused elsewhere in the
    /// account).
    storm: Option<(Duration, Duration)>,
    tally: Tally,
    /// Every call, as `Action(argument)`, when [`Options::log_calls`].
    log: Vec<String>,
    /// Errors the next calls of an action get, in order, before anything else happens.
    failures: HashMap<Action, Vec<CloudError>>,
    /// Calls of an action still to apply and then answer as a lost connection.
    lost_answers: HashMap<Action, u32>,
    faults: Injector,
    iam: Iam,
}

/// One AWS account's EC2 in process.
pub struct Account {
    inner: Mutex<Inner>,
    options: Options,
    start: Instant,
}

/// A call whose answer never arrived, as the real client reports a dropped connection.
fn lost(action: Action) -> CloudError {
    CloudError::new(
        action,
        CloudErrorKind::Unavailable,
        "connection closed before the answer",
    )
}

fn ec2_error(action: Action, e: Ec2Error) -> CloudError {
    CloudError::from_code(action, &e.code, e.message)
}

fn bucket(action: Action, b: Buckets) -> TokenBucket {
    let (burst, rate) = if action.is_describe() {
        b.describe
    } else {
        b.mutate
    };
    // A server bucket queues nobody: without a token the call is refused.
    TokenBucket::new("EC2's account bucket", burst, rate, 0)
        .unwrap_or_else(|e| unreachable!("EC2's documented buckets are valid: {e}"))
}

impl Account {
    /// An account holding `model`, its clock starting now.
    pub fn new(model: Model, options: Options) -> Arc<Account> {
        Arc::new(Account {
            inner: Mutex::new(Inner {
                model,
                buckets: HashMap::new(),
                storm: None,
                tally: Tally::default(),
                log: Vec::new(),
                failures: HashMap::new(),
                lost_answers: HashMap::new(),
                faults: Injector::default(),
                iam: Iam::default(),
            }),
            options,
            start: Instant::now(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every change is made whole under the lock (the model validates before it mutates).
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The options it was made with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Time since the account was made (tokio's clock, so a paused runtime moves it).
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// EC2 refuses every call between `from` and `until` (times since the start).
    pub fn storm(&self, from: Duration, until: Duration) {
        self.lock().storm = Some((from, until));
    }

    /// What EC2 answered so far.
    pub fn tally(&self) -> Tally {
        self.lock().tally.clone()
    }

    /// Every call so far, as `Action(argument)`, in order (empty unless
    /// [`Options::log_calls`]).
    pub fn calls(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Makes the next calls of `action` fail with these errors, one per call, before any other
    /// check (the model is not touched).
    pub fn fail_next(&self, action: Action, errors: Vec<CloudError>) {
        self.lock()
            .failures
            .entry(action)
            .or_default()
            .extend(errors);
    }

    /// Makes the next `n` calls of `action` take effect and then fail as a lost answer does
    /// (`Unavailable`), so only what the call left behind (e.g. its ClientToken) can tell a
    /// retry what happened.
    pub fn lose_answers(&self, action: Action, n: u32) {
        self.lock().lost_answers.insert(action, n);
    }

    /// Replaces the fault plan, as `PUT /_sim/faults` does; a bad plan changes nothing.
    pub fn set_faults(&self, plan: Faults) -> Result<(), FaultError> {
        self.lock().faults.set(plan)
    }

    /// The fault plan in force and what it injected so far.
    pub fn fault_report(&self) -> FaultReport {
        self.lock().faults.report()
    }

    /// Replaces the IAM policy, as `PUT /_sim/iam` does; a bad policy changes nothing.
    pub fn set_iam(&self, policy: IamPolicy) -> Result<(), IamError> {
        self.lock().iam.set(policy)
    }

    /// The IAM policy in force and the calls it denied so far.
    pub fn iam_report(&self) -> IamReport {
        self.lock().iam.report()
    }

    /// Fragments `subnet_id` as `PUT /_sim/fragment` does: outside EC2's accounting, since it
    /// stands for someone else's addresses appearing in the subnet, not a call of this account.
    pub fn set_fragment(&self, subnet_id: &str, f: Fragment) -> Result<FragmentReport, ModelError> {
        self.with_model(|m| m.set_fragment(subnet_id, f))
    }

    /// Every subnet's fragmentation, as `GET /_sim/fragment` shows it.
    pub fn fragment_reports(&self) -> Vec<FragmentReport> {
        self.with_model(|m| m.fragment_reports())
    }

    /// The model, outside EC2's accounting (setting up a scenario, reading what is there).
    pub fn with_model<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        f(&mut self.lock().model)
    }

    /// Every ENI as DescribeNetworkInterfaces shows it, by id, read outside EC2's accounting
    /// (what a test checks EC2 holds, without a call of its own in the log).
    pub fn network_interfaces(&self) -> Vec<NetworkInterface> {
        self.with_model(|m| m.enis().map(|e| interface(m, e)).collect())
    }

    /// One ENI as DescribeNetworkInterfaces shows it, outside EC2's accounting; `None` when
    /// EC2 has no such ENI.
    pub fn network_interface(&self, id: &str) -> Option<NetworkInterface> {
        self.with_model(|m| m.eni(id).ok().map(|e| interface(m, e)))
    }

    /// One EC2 request of `action` (`arg` says what it was about, for the log): in the order
    /// the HTTP server and EC2 take them, a scripted failure, the latency, the fault plan, the
    /// request buckets, the IAM policy, and then `f` on the model.
    pub(super) async fn call<T, E: Into<Ec2Error>>(
        &self,
        action: Action,
        arg: impl FnOnce() -> String,
        f: impl FnOnce(&mut Model, u64) -> Result<T, E>,
    ) -> Result<T, CloudError> {
        let fault = {
            let mut inner = self.lock();
            if self.options.log_calls {
                let entry = format!("{action}({})", arg());
                inner.log.push(entry);
            }
            if let Some(queue) = inner.failures.get_mut(&action).filter(|q| !q.is_empty()) {
                return Err(queue.remove(0));
            }
            inner.faults.decide(action.wire_name())
        };
        let delay = self.options.latency.map_or(Duration::ZERO, |l| l(action))
            + Duration::from_millis(fault.slow_ms);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match fault.outcome {
            Outcome::Throttle => return Err(ec2_error(action, inject::throttled())),
            Outcome::ServerError(kind) => {
                return Err(ec2_error(action, inject::server_error(kind)));
            }
            Outcome::Drop => return Err(lost(action)),
            Outcome::Answer | Outcome::DropAfter => {}
        }
        let now = self.elapsed();
        let now_ms = self.now_ms();
        let mut inner = self.lock();
        // Counted once answered (after its latency), as EC2's own metrics would.
        *inner.tally.calls.entry(action).or_default() += 1;
        let storming = inner
            .storm
            .is_some_and(|(from, until)| from <= now && now < until);
        let no_token = self.options.buckets.is_some_and(|b| {
            inner
                .buckets
                .entry(action)
                .or_insert_with(|| bucket(action, b))
                .take(now)
                .is_none()
        });
        if storming || no_token {
            inner.tally.throttled += 1;
            return Err(ec2_error(action, inject::throttled()));
        }
        if inner.iam.check(action.wire_name()) {
            return Err(ec2_error(action, inject::unauthorized(action.wire_name())));
        }
        let result = f(&mut inner.model, now_ms).map_err(|e| ec2_error(action, e.into()));
        let lose = inner.lost_answers.get_mut(&action).filter(|n| **n > 0);
        if let Some(n) = lose {
            *n -= 1;
            return Err(lost(action));
        }
        if fault.outcome == Outcome::DropAfter {
            return Err(lost(action));
        }
        result
    }
}
