//! Client-side rate limiting for EC2: a token bucket per API, and jittered exponential backoff
//! when EC2 throttles anyway or fails transiently (5xx, a dropped connection, a timeout). The
//! Go CNI has neither (it relies on the SDK's retryer alone), and a whole node group starting
//! at once throttles its account (reference §8, row 5). This is the client's only retry layer
//! (the SDK's own is turned off in `aws`), so every retry and every wait reaches the metrics.
//!
//! The arithmetic ([`TokenBucket`], [`Backoff`]) is pure and takes time as an argument;
//! [`Throttled`] wraps any [`Ec2`] and does the waiting.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ipnetwork::Ipv4Network;

use crate::{
    CloudError, CloudErrorKind, CreateEni, Ec2, EniFilter, InstanceLimits, NetworkInterface,
};

/// A token bucket: `capacity` calls at once, refilled at `per_second`. Calls beyond the tokens
/// are queued: each gets the moment its token will exist.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    capacity: f64,
    per_second: f64,
    tokens: f64,
    last: Duration,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(capacity: u32, per_second: f64) -> Self {
        TokenBucket {
            capacity: f64::from(capacity.max(1)),
            per_second: per_second.max(f64::MIN_POSITIVE),
            tokens: f64::from(capacity.max(1)),
            last: Duration::ZERO,
        }
    }

    /// Takes a token at `now` (time since any fixed origin, never going back) and returns how
    /// long the caller must wait before using it (zero when one was available).
    pub fn take(&mut self, now: Duration) -> Duration {
        let elapsed = now.saturating_sub(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.capacity);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.per_second)
        }
    }
}

/// Exponential backoff with jitter: attempt `n` waits between half and all of
/// `min(cap, base × 2^n)`, so retries of many nodes spread out but still make progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub base: Duration,
    /// The longest delay.
    pub cap: Duration,
}

impl Backoff {
    /// The delay before retry `attempt` (0-based); `jitter` in 0.0..=1.0 picks within the range.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX))
            .min(self.cap);
        ceiling / 2 + ceiling.mul_f64(jitter.clamp(0.0, 1.0) / 2.0)
    }
}

/// How hard [`Throttled`] lets a node call EC2.
#[derive(Clone, Copy, Debug)]
pub struct ThrottlePolicy {
    /// Burst and refill per second of each Describe* API.
    pub describe: (u32, f64),
    /// Burst and refill per second of each mutating API.
    pub mutate: (u32, f64),
    /// Attempts per call in all, when EC2 throttles or fails transiently.
    pub attempts: u32,
    /// Backoff between them.
    pub backoff: Backoff,
}

impl Default for ThrottlePolicy {
    /// Well under EC2's account-wide buckets (100 at 20/s for Describe*, 200 at 5/s for
    /// mutating calls) even with many nodes, yet enough for a node's own bursts: creating and
    /// attaching an ENI uses four different APIs.
    fn default() -> Self {
        ThrottlePolicy {
            describe: (20, 5.0),
            mutate: (10, 2.0),
            attempts: 6,
            backoff: Backoff {
                base: Duration::from_millis(200),
                cap: Duration::from_secs(10),
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
}

/// Told about every EC2 request [`Throttled`] sends (each retry is a request of its own), for
/// metrics. Waits for a token are not part of `elapsed`: that is EC2's time alone.
pub trait CallObserver: Send + Sync {
    /// `api` (e.g. `AssignPrivateIpAddresses`) took `elapsed` and ended with `error`, if any.
    fn observe(&self, api: &str, elapsed: Duration, error: Option<&CloudError>);

    /// `api` failed with `error` and is retried after `delay`.
    fn backoff(&self, api: &str, error: &CloudError, delay: Duration) {
        let _ = (api, error, delay);
    }
}

/// Whether a failure may go away by itself: EC2 throttling, or EC2 failing or unreachable.
/// Retrying a mutating call after a transient failure may repeat it (EC2 may have acted before
/// the answer was lost); the callers' reconciliation copes with that, as it must with the SDK.
fn transient(e: &CloudError) -> bool {
    matches!(
        e.kind,
        CloudErrorKind::Throttled | CloudErrorKind::Unavailable
    )
}

/// An [`Ec2`] whose calls pass a token bucket per API and are retried with backoff when EC2
/// throttles them or fails transiently.
pub struct Throttled<E> {
    inner: E,
    policy: ThrottlePolicy,
    buckets: Mutex<HashMap<&'static str, TokenBucket>>,
    origin: Instant,
    stats: ThrottleStats,
    observer: Option<Arc<dyn CallObserver>>,
}

impl<E: Ec2> Throttled<E> {
    /// Wraps `inner`.
    pub fn new(inner: E, policy: ThrottlePolicy) -> Self {
        Throttled {
            inner,
            policy,
            buckets: Mutex::new(HashMap::new()),
            origin: Instant::now(),
            stats: ThrottleStats::default(),
            observer: None,
        }
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

    fn token(&self, api: &'static str) -> Duration {
        let (burst, rate) = if api.starts_with("Describe") {
            self.policy.describe
        } else {
            self.policy.mutate
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        buckets
            .entry(api)
            .or_insert_with(|| TokenBucket::new(burst, rate))
            .take(self.origin.elapsed())
    }

    async fn call<T, F, Fut>(&self, api: &'static str, mut f: F) -> Result<T, CloudError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, CloudError>>,
    {
        let mut attempt = 0;
        loop {
            let wait = self.token(api);
            if !wait.is_zero() {
                self.stats.waits.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(wait).await;
            }
            let started = Instant::now();
            let result = f().await;
            if let Some(observer) = &self.observer {
                observer.observe(api, started.elapsed(), result.as_ref().err());
            }
            match result {
                Err(e) if transient(&e) && attempt + 1 < self.policy.attempts => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    let jitter =
                        f64::from(getrandom::u32().unwrap_or(u32::MAX / 2)) / f64::from(u32::MAX);
                    let delay = self.policy.backoff.delay(attempt, jitter);
                    if let Some(observer) = &self.observer {
                        observer.backoff(api, &e, delay);
                    }
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

impl<E: Ec2> Ec2 for Throttled<E> {
    async fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError> {
        self.call("DescribeInstanceTypes", || {
            self.inner.describe_instance_type(instance_type)
        })
        .await
    }

    async fn describe_network_interfaces(
        &self,
        ids: &[String],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.call("DescribeNetworkInterfaces", || {
            self.inner.describe_network_interfaces(ids)
        })
        .await
    }

    async fn assign_private_ips(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Addr>, CloudError> {
        self.call("AssignPrivateIpAddresses", || {
            self.inner.assign_private_ips(eni_id, count)
        })
        .await
    }

    async fn unassign_private_ips(&self, eni_id: &str, ips: &[Ipv4Addr]) -> Result<(), CloudError> {
        self.call("UnassignPrivateIpAddresses", || {
            self.inner.unassign_private_ips(eni_id, ips)
        })
        .await
    }

    async fn describe_instance_enis(
        &self,
        instance_id: &str,
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.call("DescribeNetworkInterfaces", || {
            self.inner.describe_instance_enis(instance_id)
        })
        .await
    }

    async fn create_network_interface(
        &self,
        request: &CreateEni,
    ) -> Result<NetworkInterface, CloudError> {
        self.call("CreateNetworkInterface", || {
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
        self.call("AttachNetworkInterface", || {
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
        self.call("ModifyNetworkInterfaceAttribute", || {
            self.inner.set_delete_on_termination(eni_id, attachment_id)
        })
        .await
    }

    async fn detach_network_interface(&self, attachment_id: &str) -> Result<(), CloudError> {
        self.call("DetachNetworkInterface", || {
            self.inner.detach_network_interface(attachment_id)
        })
        .await
    }

    async fn delete_network_interface(&self, eni_id: &str) -> Result<(), CloudError> {
        self.call("DeleteNetworkInterface", || {
            self.inner.delete_network_interface(eni_id)
        })
        .await
    }

    async fn assign_ipv4_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Network>, CloudError> {
        self.call("AssignPrivateIpAddresses", || {
            self.inner.assign_ipv4_prefixes(eni_id, count)
        })
        .await
    }

    async fn unassign_ipv4_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv4Network],
    ) -> Result<(), CloudError> {
        self.call("UnassignPrivateIpAddresses", || {
            self.inner.unassign_ipv4_prefixes(eni_id, prefixes)
        })
        .await
    }

    async fn find_network_interfaces(
        &self,
        filters: &[EniFilter],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.call("DescribeNetworkInterfaces", || {
            self.inner.find_network_interfaces(filters)
        })
        .await
    }

    async fn create_tags(
        &self,
        resource_id: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), CloudError> {
        self.call("CreateTags", || self.inner.create_tags(resource_id, tags))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fake::FakeEc2;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_bucket_allows_its_burst_then_queues_at_its_rate() {
        let mut b = TokenBucket::new(2, 1.0);
        assert_eq!(b.take(ms(0)), Duration::ZERO);
        assert_eq!(b.take(ms(0)), Duration::ZERO);
        assert_eq!(b.take(ms(0)), ms(1000), "the third waits a refill");
        assert_eq!(b.take(ms(0)), ms(2000), "the fourth queues behind it");
        // Long idle: refilled to capacity, not beyond.
        assert_eq!(b.take(ms(60_000)), Duration::ZERO);
        assert_eq!(b.take(ms(60_000)), Duration::ZERO);
        assert!(b.take(ms(60_000)) > Duration::ZERO);
    }

    #[test]
    fn time_going_back_does_not_mint_tokens() {
        let mut b = TokenBucket::new(1, 1.0);
        b.take(ms(5_000));
        assert!(b.take(ms(1_000)) > Duration::ZERO);
    }

    #[test]
    fn backoff_doubles_within_jitter_and_stops_at_the_cap() {
        let b = Backoff {
            base: ms(100),
            cap: ms(1_000),
        };
        assert_eq!(b.delay(0, 0.0), ms(50));
        assert_eq!(b.delay(0, 1.0), ms(100));
        assert_eq!(b.delay(2, 0.0), ms(200));
        assert_eq!(b.delay(2, 1.0), ms(400));
        assert_eq!(b.delay(10, 1.0), ms(1_000));
        assert_eq!(b.delay(200, 0.5), ms(750), "huge attempts do not overflow");
    }

    fn quick() -> ThrottlePolicy {
        ThrottlePolicy {
            attempts: 4,
            backoff: Backoff {
                base: ms(1),
                cap: ms(4),
            },
            ..ThrottlePolicy::default()
        }
    }

    fn throttled(api: &str) -> CloudError {
        CloudError::from_code(api, "RequestLimitExceeded", "Request limit exceeded.")
    }

    #[tokio::test]
    async fn throttled_calls_are_retried_and_counted() {
        let fake = Arc::new(FakeEc2::default());
        fake.fail_next(
            "DescribeNetworkInterfaces",
            vec![throttled("D"), throttled("D")],
        );
        let ec2 = Throttled::new(Arc::clone(&fake), quick());
        assert!(ec2.describe_instance_enis("i-1").await.unwrap().is_empty());
        assert_eq!(ec2.stats().retries.load(Ordering::Relaxed), 2);
        assert_eq!(fake.calls().len(), 3);
    }

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(String, Option<String>)>>);

    impl CallObserver for Recorder {
        fn observe(&self, api: &str, _elapsed: Duration, error: Option<&CloudError>) {
            let code = error.and_then(|e| e.code.clone());
            self.0.lock().unwrap().push((api.to_string(), code));
        }
    }

    #[tokio::test]
    async fn the_observer_sees_every_request_including_retries() {
        let fake = Arc::new(FakeEc2::default());
        fake.fail_next("DescribeNetworkInterfaces", vec![throttled("D")]);
        let recorder = Arc::new(Recorder::default());
        let ec2 = Throttled::new(Arc::clone(&fake), quick())
            .with_observer(Arc::clone(&recorder) as Arc<dyn CallObserver>);
        ec2.describe_instance_enis("i-1").await.unwrap();
        let seen = recorder.0.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![
                (
                    "DescribeNetworkInterfaces".to_string(),
                    Some("RequestLimitExceeded".to_string())
                ),
                ("DescribeNetworkInterfaces".to_string(), None),
            ]
        );
    }

    #[tokio::test]
    async fn retries_are_bounded_and_other_errors_are_not_retried() {
        let fake = Arc::new(FakeEc2::default());
        fake.fail_next(
            "DescribeNetworkInterfaces",
            (0..10).map(|_| throttled("D")).collect(),
        );
        let ec2 = Throttled::new(Arc::clone(&fake), quick());
        let err = ec2.describe_instance_enis("i-1").await.unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::Throttled);
        assert_eq!(fake.calls().len(), 4, "attempts in all");

        let err = ec2.delete_network_interface("eni-none").await.unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::NotFound);
        assert_eq!(fake.calls().len(), 5, "a NotFound is final");
    }

    #[derive(Default)]
    struct Backoffs(Mutex<Vec<(String, CloudErrorKind, Duration)>>);

    impl CallObserver for Backoffs {
        fn observe(&self, _: &str, _: Duration, _: Option<&CloudError>) {}
        fn backoff(&self, api: &str, error: &CloudError, delay: Duration) {
            self.0
                .lock()
                .unwrap()
                .push((api.to_string(), error.kind, delay));
        }
    }

    #[tokio::test]
    async fn transient_failures_are_retried_with_each_backoff_reported() {
        let fake = Arc::new(FakeEc2::default());
        let unavailable = CloudError {
            api: "A".into(),
            kind: CloudErrorKind::Unavailable,
            code: Some("InternalError".into()),
            message: "An internal error has occurred.".into(),
        };
        fake.fail_next(
            "AssignPrivateIpAddresses",
            vec![unavailable, throttled("A")],
        );
        let seen = Arc::new(Backoffs::default());
        let ec2 = Throttled::new(Arc::clone(&fake), quick())
            .with_observer(Arc::clone(&seen) as Arc<dyn CallObserver>);
        // The fake refuses the unknown ENI once the injected failures are used up: a final
        // error, reached only because both transient ones were retried.
        let err = ec2.assign_private_ips("eni-x", 1).await.unwrap_err();
        assert_ne!(err.kind, CloudErrorKind::Unavailable, "{err}");
        let seen = seen.0.lock().unwrap().clone();
        let kinds: Vec<_> = seen.iter().map(|(api, k, _)| (api.as_str(), *k)).collect();
        assert_eq!(
            kinds,
            vec![
                ("AssignPrivateIpAddresses", CloudErrorKind::Unavailable),
                ("AssignPrivateIpAddresses", CloudErrorKind::Throttled),
            ]
        );
        // Within the policy's jittered range: half to all of 1 ms, then of 2 ms.
        assert!(seen[0].2 >= ms(1) / 2 && seen[0].2 <= ms(1), "{seen:?}");
        assert!(seen[1].2 >= ms(1) && seen[1].2 <= ms(2), "{seen:?}");
        assert_eq!(ec2.stats().retries.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_burst_beyond_the_bucket_waits() {
        let fake = Arc::new(FakeEc2::default());
        let policy = ThrottlePolicy {
            describe: (2, 50.0),
            ..quick()
        };
        let ec2 = Throttled::new(Arc::clone(&fake), policy);
        for _ in 0..4 {
            ec2.describe_instance_enis("i-1").await.unwrap();
        }
        assert_eq!(ec2.stats().waits.load(Ordering::Relaxed), 2);
    }
}
