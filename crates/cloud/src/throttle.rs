//! Client-side rate limiting for EC2: a token bucket per API, and the retry policy
//! ([`crate::retry`]) for calls EC2 throttles anyway or fails transiently (5xx, a dropped
//! connection, a timeout). The Go CNI has neither (it relies on the SDK's retryer alone), and a
//! whole node group starting at once throttles its account (reference §8, row 5). This is the
//! only layer that retries EC2 calls (the SDK's own retries are off in `aws`, and the daemon
//! does not retry on top), so every retry and every wait reaches the metrics.
//!
//! The bucket arithmetic ([`TokenBucket`]) is pure and takes time as an argument; [`Throttled`]
//! wraps any [`Ec2`] and does the waiting, on tokio's clock.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ipnetwork::{Ipv4Network, Ipv6Network};
use thiserror::Error;
use tokio::time::Instant;

use crate::retry::{RetryPolicy, retry};
use crate::{
    Action, CloudError, CloudErrorKind, CreateEni, Ec2, EniFilter, InstanceLimits,
    NetworkInterface, Subnet,
};

/// A rate or queue setting that cannot work.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ThrottleConfigError {
    /// A bucket refills at zero, a negative or a non-finite rate: every call would wait forever.
    #[error("{what}: a refill rate of {rate} calls per second is not positive")]
    Rate {
        /// Which bucket.
        what: &'static str,
        /// The rate given.
        rate: f64,
    },
    /// A bucket holds no token at all.
    #[error("{what}: a burst of 0 calls lets no call through")]
    Burst {
        /// Which bucket.
        what: &'static str,
    },
    /// No attempt at all.
    #[error("a retry policy needs at least one attempt")]
    Attempts,
}

/// The slowest a bucket refills after EC2 throttled its API: one call every 50 s.
pub const MIN_RATE: f64 = 0.02;

/// A token bucket: `capacity` calls at once, refilled at `per_second`. Calls beyond the tokens
/// queue, each told the moment its token will exist, up to `max_queue` of them.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    capacity: f64,
    /// The refill rate now: `max_rate`, or less after EC2 throttled ([`TokenBucket::throttled`]).
    per_second: f64,
    max_rate: f64,
    max_queue: f64,
    tokens: f64,
    last: Duration,
}

impl TokenBucket {
    /// A full bucket. `what` names it in errors.
    pub fn new(
        what: &'static str,
        capacity: u32,
        per_second: f64,
        max_queue: u32,
    ) -> Result<Self, ThrottleConfigError> {
        if capacity == 0 {
            return Err(ThrottleConfigError::Burst { what });
        }
        if !(per_second.is_finite() && per_second > 0.0) {
            return Err(ThrottleConfigError::Rate {
                what,
                rate: per_second,
            });
        }
        Ok(TokenBucket {
            capacity: f64::from(capacity),
            per_second,
            max_rate: per_second,
            max_queue: f64::from(max_queue),
            tokens: f64::from(capacity),
            last: Duration::ZERO,
        })
    }

    /// EC2 refused a call for the account's rate (`RequestLimitExceeded`): the rate halves,
    /// down to [`MIN_RATE`], and the tokens left are dropped, so the node's next calls spread
    /// out. Every node of a busy account does the same, and together they fall under what the
    /// account allows instead of each retrying at its own full rate (additive increase,
    /// multiplicative decrease, as TCP shares a link).
    pub fn throttled(&mut self, now: Duration) {
        self.refill(now);
        self.per_second = (self.per_second / 2.0).max(MIN_RATE.min(self.max_rate));
        self.tokens = self.tokens.min(0.0);
    }

    /// A call went through: the rate climbs back by a tenth of the configured one, up to it.
    pub fn succeeded(&mut self) {
        self.per_second = (self.per_second + self.max_rate / 10.0).min(self.max_rate);
    }

    /// The refill rate now.
    pub fn rate(&self) -> f64 {
        self.per_second
    }

    fn refill(&mut self, now: Duration) {
        let elapsed = now.saturating_sub(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.capacity);
    }

    /// Takes a token at `now` (time since any fixed origin, never going back) and returns how
    /// long the caller must wait before using it (zero when one was available), or `None`
    /// without taking one when `max_queue` callers are already waiting.
    pub fn take(&mut self, now: Duration) -> Option<Duration> {
        self.refill(now);
        if self.tokens - 1.0 < -self.max_queue {
            return None;
        }
        self.tokens -= 1.0;
        Some(if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.per_second)
        })
    }
}

/// How hard [`Throttled`] lets a node call EC2.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThrottlePolicy {
    /// Burst and refill per second of each Describe* API.
    pub describe: (u32, f64),
    /// Burst and refill per second of each mutating API.
    pub mutate: (u32, f64),
    /// Calls of one API that may wait for a token at once; more are refused at once
    /// ([`CloudErrorKind::Overloaded`]) rather than piling up behind an ever longer wait.
    pub max_queue: u32,
    /// Retries of throttled and transiently failing calls.
    pub retry: RetryPolicy,
}

impl Default for ThrottlePolicy {
    /// Well under EC2's account-wide buckets (100 at 20/s for Describe*, 200 at 5/s for
    /// mutating calls) even with many nodes, yet enough for a node's own bursts: creating and
    /// attaching an ENI uses four different APIs.
    fn default() -> Self {
        ThrottlePolicy {
            describe: (20, 5.0),
            mutate: (10, 2.0),
            max_queue: 64,
            retry: RetryPolicy {
                attempts: 6,
                first_delay: Duration::from_millis(100),
                max_delay: Duration::from_secs(5),
            },
        }
    }
}

/// What the throttle did, for logs and metrics.
#[derive(Debug, Default)]
pub struct ThrottleStats {
    /// Calls that waited for a token.
    pub waits: AtomicU64,
    /// Calls EC2 throttled or failed transiently and that were retried.
    pub retries: AtomicU64,
    /// Calls refused because too many were already waiting for a token.
    pub refused: AtomicU64,
}

/// Told about every EC2 request [`Throttled`] sends (each retry is a request of its own), for
/// metrics. Waits for a token are not part of `elapsed`: that is EC2's time alone.
pub trait CallObserver: Send + Sync {
    /// `api` took `elapsed` and ended with `error`, if any.
    fn observe(&self, api: Action, elapsed: Duration, error: Option<&CloudError>);

    /// `api` failed with `error` and is retried after `delay`.
    fn backoff(&self, api: Action, error: &CloudError, delay: Duration) {
        let _ = (api, error, delay);
    }
}

/// An [`Ec2`] whose calls pass a token bucket per API and are retried with backoff when EC2
/// throttles them or fails transiently.
pub struct Throttled<E> {
    inner: E,
    policy: ThrottlePolicy,
    /// A full bucket of each kind, copied for each API on its first call.
    describe: TokenBucket,
    mutate: TokenBucket,
    buckets: Mutex<HashMap<Action, TokenBucket>>,
    /// When EC2 last answered `RequestLimitExceeded`, since `origin`.
    last_throttled: Mutex<Option<Duration>>,
    origin: Instant,
    stats: ThrottleStats,
    observer: Option<Arc<dyn CallObserver>>,
}

impl<E: Ec2> Throttled<E> {
    /// Wraps `inner`; fails when `policy` cannot work: a bucket without tokens or refill, or
    /// no attempt at all.
    pub fn new(inner: E, policy: ThrottlePolicy) -> Result<Self, ThrottleConfigError> {
        let bucket = |what, (burst, rate)| TokenBucket::new(what, burst, rate, policy.max_queue);
        let describe = bucket("Describe* calls", policy.describe)?;
        let mutate = bucket("mutating calls", policy.mutate)?;
        if policy.retry.attempts == 0 {
            return Err(ThrottleConfigError::Attempts);
        }
        Ok(Throttled {
            inner,
            policy,
            describe,
            mutate,
            buckets: Mutex::new(HashMap::new()),
            last_throttled: Mutex::new(None),
            origin: Instant::now(),
            stats: ThrottleStats::default(),
            observer: None,
        })
    }

    /// Reports every request to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The wrapped client.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// Counters.
    pub fn stats(&self) -> &ThrottleStats {
        &self.stats
    }

    /// Waits for a token of `api`'s bucket, or refuses when its queue is full.
    async fn token(&self, api: Action) -> Result<(), CloudError> {
        let template = if api.is_describe() {
            &self.describe
        } else {
            &self.mutate
        };
        let wait = self
            .buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(api)
            .or_insert_with(|| template.clone())
            .take(self.origin.elapsed());
        match wait {
            None => {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                Err(CloudError::new(
                    api,
                    CloudErrorKind::Overloaded,
                    format!(
                        "{} calls already wait for the client's rate limit; not sent",
                        self.policy.max_queue
                    ),
                ))
            }
            Some(wait) if !wait.is_zero() => {
                self.stats.waits.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(wait).await;
                Ok(())
            }
            Some(_) => Ok(()),
        }
    }

    /// One request: a token, then the call, reported to the observer.
    async fn attempt<T, Fut>(&self, api: Action, f: &impl Fn() -> Fut) -> Result<T, CloudError>
    where
        Fut: Future<Output = Result<T, CloudError>>,
    {
        self.token(api).await?;
        let started = Instant::now();
        let result = f().await;
        if let Some(bucket) = self
            .buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&api)
        {
            match &result {
                Err(e) if e.kind == CloudErrorKind::Throttled => {
                    let now = self.origin.elapsed();
                    bucket.throttled(now);
                    *self
                        .last_throttled
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(now);
                }
                Err(_) => {}
                Ok(_) => bucket.succeeded(),
            }
        }
        if let Some(observer) = &self.observer {
            observer.observe(api, started.elapsed(), result.as_ref().err());
        }
        result
    }

    async fn call<T, F, Fut>(&self, api: Action, f: F) -> Result<T, CloudError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, CloudError>>,
    {
        retry(
            &self.policy.retry,
            || self.attempt(api, &f),
            |e, delay| {
                self.stats.retries.fetch_add(1, Ordering::Relaxed);
                if let Some(observer) = &self.observer {
                    observer.backoff(api, e, delay);
                }
            },
        )
        .await
    }
}

impl<E: Ec2> Ec2 for Throttled<E> {
    async fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError> {
        self.call(Action::DescribeInstanceTypes, || {
            self.inner.describe_instance_type(instance_type)
        })
        .await
    }

    async fn describe_network_interfaces(
        &self,
        ids: &[String],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.call(Action::DescribeNetworkInterfaces, || {
            self.inner.describe_network_interfaces(ids)
        })
        .await
    }

    async fn assign_private_ips(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Addr>, CloudError> {
        self.call(Action::AssignPrivateIpAddresses, || {
            self.inner.assign_private_ips(eni_id, count)
        })
        .await
    }

    async fn unassign_private_ips(&self, eni_id: &str, ips: &[Ipv4Addr]) -> Result<(), CloudError> {
        self.call(Action::UnassignPrivateIpAddresses, || {
            self.inner.unassign_private_ips(eni_id, ips)
        })
        .await
    }

    async fn describe_instance_enis(
        &self,
        instance_id: &str,
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.call(Action::DescribeNetworkInterfaces, || {
            self.inner.describe_instance_enis(instance_id)
        })
        .await
    }

    async fn create_network_interface(
        &self,
        request: &CreateEni,
    ) -> Result<NetworkInterface, CloudError> {
        self.call(Action::CreateNetworkInterface, || {
            self.inner.create_network_interface(request)
        })
        .await
    }

    async fn attach_network_interface(
        &self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
    ) -> Result<String, CloudError> {
        self.call(Action::AttachNetworkInterface, || {
            self.inner
                .attach_network_interface(eni_id, instance_id, device_index)
        })
        .await
    }

    async fn set_delete_on_termination(
        &self,
        eni_id: &str,
        attachment_id: &str,
    ) -> Result<(), CloudError> {
        self.call(Action::ModifyNetworkInterfaceAttribute, || {
            self.inner.set_delete_on_termination(eni_id, attachment_id)
        })
        .await
    }

    async fn detach_network_interface(&self, attachment_id: &str) -> Result<(), CloudError> {
        self.call(Action::DetachNetworkInterface, || {
            self.inner.detach_network_interface(attachment_id)
        })
        .await
    }

    async fn delete_network_interface(&self, eni_id: &str) -> Result<(), CloudError> {
        self.call(Action::DeleteNetworkInterface, || {
            self.inner.delete_network_interface(eni_id)
        })
        .await
    }

    async fn assign_ipv4_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Network>, CloudError> {
        self.call(Action::AssignPrivateIpAddresses, || {
            self.inner.assign_ipv4_prefixes(eni_id, count)
        })
        .await
    }

    async fn unassign_ipv4_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv4Network],
    ) -> Result<(), CloudError> {
        self.call(Action::UnassignPrivateIpAddresses, || {
            self.inner.unassign_ipv4_prefixes(eni_id, prefixes)
        })
        .await
    }

    async fn assign_ipv6_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv6Network>, CloudError> {
        self.call(Action::AssignIpv6Addresses, || {
            self.inner.assign_ipv6_prefixes(eni_id, count)
        })
        .await
    }

    async fn unassign_ipv6_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv6Network],
    ) -> Result<(), CloudError> {
        self.call(Action::UnassignIpv6Addresses, || {
            self.inner.unassign_ipv6_prefixes(eni_id, prefixes)
        })
        .await
    }

    async fn find_network_interfaces(
        &self,
        filters: &[EniFilter],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.call(Action::DescribeNetworkInterfaces, || {
            self.inner.find_network_interfaces(filters)
        })
        .await
    }

    async fn create_tags(
        &self,
        resource_id: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), CloudError> {
        self.call(Action::CreateTags, || {
            self.inner.create_tags(resource_id, tags)
        })
        .await
    }

    async fn describe_subnets(&self, filters: &[EniFilter]) -> Result<Vec<Subnet>, CloudError> {
        self.call(Action::DescribeSubnets, || {
            self.inner.describe_subnets(filters)
        })
        .await
    }

    fn throttled_within(&self, window: Duration) -> bool {
        let last = *self
            .last_throttled
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        last.is_some_and(|at| self.origin.elapsed().saturating_sub(at) < window)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// EC2 with nothing in it, recording each request's action and failing the next requests
    /// of an action as scripted: enough to watch the throttle's buckets and retries.
    #[derive(Default)]
    struct Empty {
        calls: Mutex<Vec<Action>>,
        failures: Mutex<HashMap<Action, Vec<CloudError>>>,
    }

    impl Empty {
        fn fail_next(&self, api: Action, errors: Vec<CloudError>) {
            self.failures
                .lock()
                .unwrap()
                .entry(api)
                .or_default()
                .extend(errors);
        }

        fn calls(&self) -> Vec<Action> {
            self.calls.lock().unwrap().clone()
        }

        /// A request of `api`: a scripted failure, else `found` (an empty answer) for a
        /// listing, or `NotFound` for a call naming something, as nothing exists.
        fn answer<T>(&self, api: Action, found: Option<T>) -> Result<T, CloudError> {
            self.calls.lock().unwrap().push(api);
            if let Some(queue) = self.failures.lock().unwrap().get_mut(&api)
                && !queue.is_empty()
            {
                return Err(queue.remove(0));
            }
            found.ok_or_else(|| CloudError::new(api, CloudErrorKind::NotFound, "nothing here"))
        }
    }

    impl Ec2 for Empty {
        async fn describe_instance_type(&self, _: &str) -> Result<InstanceLimits, CloudError> {
            self.answer(Action::DescribeInstanceTypes, None)
        }
        async fn describe_network_interfaces(
            &self,
            _: &[String],
        ) -> Result<Vec<NetworkInterface>, CloudError> {
            self.answer(Action::DescribeNetworkInterfaces, None)
        }
        async fn assign_private_ips(&self, _: &str, _: u32) -> Result<Vec<Ipv4Addr>, CloudError> {
            self.answer(Action::AssignPrivateIpAddresses, None)
        }
        async fn unassign_private_ips(&self, _: &str, _: &[Ipv4Addr]) -> Result<(), CloudError> {
            self.answer(Action::UnassignPrivateIpAddresses, None)
        }
        async fn describe_instance_enis(
            &self,
            _: &str,
        ) -> Result<Vec<NetworkInterface>, CloudError> {
            self.answer(Action::DescribeNetworkInterfaces, Some(Vec::new()))
        }
        async fn create_network_interface(
            &self,
            _: &CreateEni,
        ) -> Result<NetworkInterface, CloudError> {
            self.answer(Action::CreateNetworkInterface, None)
        }
        async fn attach_network_interface(
            &self,
            _: &str,
            _: &str,
            _: u32,
        ) -> Result<String, CloudError> {
            self.answer(Action::AttachNetworkInterface, None)
        }
        async fn set_delete_on_termination(&self, _: &str, _: &str) -> Result<(), CloudError> {
            self.answer(Action::ModifyNetworkInterfaceAttribute, None)
        }
        async fn detach_network_interface(&self, _: &str) -> Result<(), CloudError> {
            self.answer(Action::DetachNetworkInterface, None)
        }
        async fn delete_network_interface(&self, _: &str) -> Result<(), CloudError> {
            self.answer(Action::DeleteNetworkInterface, None)
        }
        async fn assign_ipv4_prefixes(
            &self,
            _: &str,
            _: u32,
        ) -> Result<Vec<Ipv4Network>, CloudError> {
            self.answer(Action::AssignPrivateIpAddresses, None)
        }
        async fn unassign_ipv4_prefixes(
            &self,
            _: &str,
            _: &[Ipv4Network],
        ) -> Result<(), CloudError> {
            self.answer(Action::UnassignPrivateIpAddresses, None)
        }
        async fn assign_ipv6_prefixes(
            &self,
            _: &str,
            _: u32,
        ) -> Result<Vec<Ipv6Network>, CloudError> {
            self.answer(Action::AssignIpv6Addresses, None)
        }
        async fn unassign_ipv6_prefixes(
            &self,
            _: &str,
            _: &[Ipv6Network],
        ) -> Result<(), CloudError> {
            self.answer(Action::UnassignIpv6Addresses, None)
        }
        async fn find_network_interfaces(
            &self,
            _: &[EniFilter],
        ) -> Result<Vec<NetworkInterface>, CloudError> {
            self.answer(Action::DescribeNetworkInterfaces, Some(Vec::new()))
        }
        async fn create_tags(
            &self,
            _: &str,
            _: &BTreeMap<String, String>,
        ) -> Result<(), CloudError> {
            self.answer(Action::CreateTags, None)
        }
        async fn describe_subnets(&self, _: &[EniFilter]) -> Result<Vec<Subnet>, CloudError> {
            self.answer(Action::DescribeSubnets, Some(Vec::new()))
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_bucket_allows_its_burst_then_queues_at_its_rate() {
        let mut b = TokenBucket::new("t", 2, 1.0, 8).unwrap();
        assert_eq!(b.take(ms(0)), Some(Duration::ZERO));
        assert_eq!(b.take(ms(0)), Some(Duration::ZERO));
        assert_eq!(b.take(ms(0)), Some(ms(1000)), "the third waits a refill");
        assert_eq!(b.take(ms(0)), Some(ms(2000)), "the fourth queues behind it");
        // Long idle: refilled to capacity, not beyond.
        assert_eq!(b.take(ms(60_000)), Some(Duration::ZERO));
        assert_eq!(b.take(ms(60_000)), Some(Duration::ZERO));
        assert!(b.take(ms(60_000)).is_some_and(|w| w > Duration::ZERO));
    }

    #[test]
    fn throttling_halves_the_rate_and_successes_bring_it_back() {
        let mut b = TokenBucket::new("t", 2, 2.0, 8).unwrap();
        assert_eq!(b.take(ms(0)), Some(Duration::ZERO));
        b.throttled(ms(0));
        assert_eq!(b.rate(), 1.0);
        assert_eq!(b.take(ms(0)), Some(ms(1000)), "the token left is dropped");
        for _ in 0..20 {
            b.throttled(ms(0));
        }
        assert_eq!(b.rate(), MIN_RATE, "never below the floor");
        for _ in 0..9 {
            b.succeeded();
        }
        assert!((b.rate() - (MIN_RATE + 1.8)).abs() < 1e-9, "{}", b.rate());
        b.succeeded();
        b.succeeded();
        assert_eq!(b.rate(), 2.0, "never above the configured rate");
    }

    #[test]
    fn time_going_back_does_not_mint_tokens() {
        let mut b = TokenBucket::new("t", 1, 1.0, 8).unwrap();
        b.take(ms(5_000));
        assert!(b.take(ms(1_000)).is_some_and(|w| w > Duration::ZERO));
    }

    #[test]
    fn the_queue_is_bounded_and_a_refused_call_takes_no_token() {
        let mut b = TokenBucket::new("t", 1, 1.0, 2).unwrap();
        assert_eq!(b.take(ms(0)), Some(Duration::ZERO));
        assert_eq!(b.take(ms(0)), Some(ms(1000)));
        assert_eq!(b.take(ms(0)), Some(ms(2000)));
        assert_eq!(b.take(ms(0)), None, "two already wait");
        assert_eq!(b.take(ms(0)), None, "refusals queue nothing");
        assert_eq!(
            b.take(ms(1000)),
            Some(ms(2000)),
            "one token refilled: a place frees"
        );
    }

    #[test]
    fn rates_and_bursts_that_cannot_work_are_refused() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = TokenBucket::new("Describe* calls", 5, rate, 8).unwrap_err();
            assert!(matches!(err, ThrottleConfigError::Rate { .. }), "{rate}");
            assert!(err.to_string().starts_with("Describe* calls"), "{err}");
        }
        assert_eq!(
            TokenBucket::new("b", 0, 1.0, 8).unwrap_err(),
            ThrottleConfigError::Burst { what: "b" }
        );
        let bad = |policy| Throttled::new(Empty::default(), policy).err();
        let zero_rate = ThrottlePolicy {
            mutate: (10, 0.0),
            ..ThrottlePolicy::default()
        };
        assert!(matches!(
            bad(zero_rate),
            Some(ThrottleConfigError::Rate {
                what: "mutating calls",
                ..
            })
        ));
        let no_attempt = ThrottlePolicy {
            retry: RetryPolicy {
                attempts: 0,
                ..ThrottlePolicy::default().retry
            },
            ..ThrottlePolicy::default()
        };
        assert_eq!(bad(no_attempt), Some(ThrottleConfigError::Attempts));
    }

    fn quick() -> ThrottlePolicy {
        ThrottlePolicy {
            retry: RetryPolicy {
                attempts: 4,
                first_delay: ms(1),
                max_delay: ms(4),
            },
            ..ThrottlePolicy::default()
        }
    }

    fn throttled_ec2(fake: &Arc<Empty>, policy: ThrottlePolicy) -> Throttled<Arc<Empty>> {
        Throttled::new(Arc::clone(fake), policy).unwrap()
    }

    fn throttled(api: impl Into<String>) -> CloudError {
        CloudError::from_code(api, "RequestLimitExceeded", "Request limit exceeded.")
    }

    #[tokio::test(start_paused = true)]
    async fn throttled_calls_are_retried_and_counted() {
        let fake = Arc::new(Empty::default());
        fake.fail_next(
            Action::DescribeNetworkInterfaces,
            vec![throttled("D"), throttled("D")],
        );
        let ec2 = throttled_ec2(&fake, quick());
        assert!(ec2.describe_instance_enis("i-1").await.unwrap().is_empty());
        assert_eq!(ec2.stats().retries.load(Ordering::Relaxed), 2);
        assert_eq!(fake.calls().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_answer_is_remembered_for_the_window_asked_about() {
        let fake = Arc::new(Empty::default());
        let ec2 = throttled_ec2(&fake, quick());
        let window = Duration::from_secs(60);
        ec2.describe_instance_enis("i-1").await.unwrap();
        assert!(!ec2.throttled_within(window), "no throttling yet");
        fake.fail_next(
            Action::DescribeNetworkInterfaces,
            vec![throttled("DescribeNetworkInterfaces")],
        );
        ec2.describe_instance_enis("i-1").await.unwrap();
        assert!(ec2.throttled_within(window), "a retried throttle counts");
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(ec2.throttled_within(window));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!ec2.throttled_within(window), "forgotten after the window");
        // Other failures are not the account's rate.
        fake.fail_next(
            Action::DescribeNetworkInterfaces,
            vec![CloudError::from_code("D", "UnauthorizedOperation", "no")],
        );
        assert!(ec2.describe_instance_enis("i-1").await.is_err());
        assert!(!ec2.throttled_within(window));
    }

    #[tokio::test(start_paused = true)]
    async fn describe_subnets_is_throttled_and_retried_as_its_own_api() {
        let fake = Arc::new(Empty::default());
        fake.fail_next(
            Action::DescribeSubnets,
            vec![throttled(Action::DescribeSubnets)],
        );
        let ec2 = throttled_ec2(&fake, quick());
        assert!(ec2.describe_subnets(&[]).await.unwrap().is_empty());
        assert_eq!(ec2.stats().retries.load(Ordering::Relaxed), 1);
        assert_eq!(
            fake.calls(),
            [Action::DescribeSubnets, Action::DescribeSubnets]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ipv6_prefix_calls_are_throttled_and_retried_as_their_own_apis() {
        let fake = Arc::new(Empty::default());
        fake.fail_next(
            Action::AssignIpv6Addresses,
            vec![throttled(Action::AssignIpv6Addresses)],
        );
        fake.fail_next(
            Action::UnassignIpv6Addresses,
            vec![throttled(Action::UnassignIpv6Addresses)],
        );
        let recorder = Arc::new(Recorder::default());
        let ec2 = throttled_ec2(&fake, quick())
            .with_observer(Arc::clone(&recorder) as Arc<dyn CallObserver>);
        // The fake knows no eni-x: each call ends NotFound once its throttling was retried.
        let e = ec2.assign_ipv6_prefixes("eni-x", 1).await.unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::NotFound, "{e}");
        let e = ec2
            .unassign_ipv6_prefixes("eni-x", &["2001:db8:0:0:1::/80".parse().unwrap()])
            .await
            .unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::NotFound, "{e}");
        assert_eq!(ec2.stats().retries.load(Ordering::Relaxed), 2);
        let apis: Vec<Action> = recorder.0.lock().unwrap().iter().map(|(a, _)| *a).collect();
        assert_eq!(
            apis,
            [
                Action::AssignIpv6Addresses,
                Action::AssignIpv6Addresses,
                Action::UnassignIpv6Addresses,
                Action::UnassignIpv6Addresses
            ]
        );
        assert_eq!(
            ec2.buckets.lock().unwrap().len(),
            2,
            "a bucket of their own each"
        );
    }

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(Action, Option<String>)>>);

    impl CallObserver for Recorder {
        fn observe(&self, api: Action, _elapsed: Duration, error: Option<&CloudError>) {
            let code = error.and_then(|e| e.code.clone());
            self.0.lock().unwrap().push((api, code));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_observer_sees_every_request_including_retries() {
        let fake = Arc::new(Empty::default());
        fake.fail_next(Action::DescribeNetworkInterfaces, vec![throttled("D")]);
        let recorder = Arc::new(Recorder::default());
        let ec2 = throttled_ec2(&fake, quick())
            .with_observer(Arc::clone(&recorder) as Arc<dyn CallObserver>);
        ec2.describe_instance_enis("i-1").await.unwrap();
        let seen = recorder.0.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![
                (
                    Action::DescribeNetworkInterfaces,
                    Some("RequestLimitExceeded".to_string())
                ),
                (Action::DescribeNetworkInterfaces, None),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_bounded_and_other_errors_are_not_retried() {
        let fake = Arc::new(Empty::default());
        fake.fail_next(
            Action::DescribeNetworkInterfaces,
            (0..10).map(|_| throttled("D")).collect(),
        );
        let ec2 = throttled_ec2(&fake, quick());
        let err = ec2.describe_instance_enis("i-1").await.unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::Throttled);
        assert_eq!(fake.calls().len(), 4, "attempts in all");

        let err = ec2.delete_network_interface("eni-none").await.unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::NotFound);
        assert_eq!(fake.calls().len(), 5, "a NotFound is final");
    }

    #[derive(Default)]
    struct Backoffs(Mutex<Vec<(Action, CloudErrorKind, Duration)>>);

    impl CallObserver for Backoffs {
        fn observe(&self, _: Action, _: Duration, _: Option<&CloudError>) {}
        fn backoff(&self, api: Action, error: &CloudError, delay: Duration) {
            self.0.lock().unwrap().push((api, error.kind, delay));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_with_each_backoff_reported() {
        let fake = Arc::new(Empty::default());
        let unavailable = CloudError {
            api: "A".into(),
            kind: CloudErrorKind::Unavailable,
            code: Some("InternalError".into()),
            message: "An internal error has occurred.".into(),
        };
        fake.fail_next(
            Action::AssignPrivateIpAddresses,
            vec![unavailable, throttled("A")],
        );
        let seen = Arc::new(Backoffs::default());
        let ec2 =
            throttled_ec2(&fake, quick()).with_observer(Arc::clone(&seen) as Arc<dyn CallObserver>);
        // The fake refuses the unknown ENI once the injected failures are used up: a final
        // error, reached only because both transient ones were retried.
        let err = ec2.assign_private_ips("eni-x", 1).await.unwrap_err();
        assert_ne!(err.kind, CloudErrorKind::Unavailable, "{err}");
        let seen = seen.0.lock().unwrap().clone();
        let kinds: Vec<_> = seen.iter().map(|(api, k, _)| (*api, *k)).collect();
        assert_eq!(
            kinds,
            vec![
                (
                    Action::AssignPrivateIpAddresses,
                    CloudErrorKind::Unavailable
                ),
                (Action::AssignPrivateIpAddresses, CloudErrorKind::Throttled),
            ]
        );
        // Within the policy's jittered range: 1 to 2 ms, then 2 to 4 ms.
        assert!(seen[0].2 >= ms(1) && seen[0].2 <= ms(2), "{seen:?}");
        assert!(seen[1].2 >= ms(2) && seen[1].2 <= ms(4), "{seen:?}");
        assert_eq!(ec2.stats().retries.load(Ordering::Relaxed), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_beyond_the_bucket_waits() {
        let fake = Arc::new(Empty::default());
        let policy = ThrottlePolicy {
            describe: (2, 50.0),
            ..quick()
        };
        let ec2 = throttled_ec2(&fake, policy);
        for _ in 0..4 {
            ec2.describe_instance_enis("i-1").await.unwrap();
        }
        assert_eq!(ec2.stats().waits.load(Ordering::Relaxed), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_beyond_the_queue_are_refused_not_sent() {
        let fake = Arc::new(Empty::default());
        let policy = ThrottlePolicy {
            describe: (1, 1.0),
            max_queue: 1,
            ..quick()
        };
        let ec2 = throttled_ec2(&fake, policy);
        let started = Instant::now();
        let (first, second, third) = tokio::join!(
            ec2.describe_instance_enis("i-1"),
            ec2.describe_instance_enis("i-1"),
            ec2.describe_instance_enis("i-1"),
        );
        assert!(first.is_ok() && second.is_ok());
        let refused = third.unwrap_err();
        assert_eq!(refused.kind, CloudErrorKind::Overloaded, "{refused}");
        assert!(
            !refused.is_transient(),
            "a refusal is not retried into the queue"
        );
        assert_eq!(fake.calls().len(), 2, "the refused call never reached EC2");
        assert_eq!(ec2.stats().refused.load(Ordering::Relaxed), 1);
        assert_eq!(started.elapsed(), ms(1000), "the second waited one refill");
    }
}
