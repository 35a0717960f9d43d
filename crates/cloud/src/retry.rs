//! The one retry policy for calls to AWS services: a bounded number of attempts with jittered
//! exponential backoff (backon), for failures that may go away by themselves. EC2 calls are
//! retried by `throttle::Throttled` with it, IMDS calls by their caller; nothing retries a call
//! that one of these already retried.

use std::future::Future;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use crate::CloudError;

/// How many times, and how patiently, a call is tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub attempts: u32,
    /// The first pause; each further pause doubles, up to `max_delay`. Jitter adds up to as much
    /// again, so many nodes retrying at once spread out.
    pub first_delay: Duration,
    /// The longest pause.
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// IMDS at startup, while the metadata service throttles or is not reachable yet: about 3 s
    /// of pauses at most before the failure is reported.
    pub const IMDS: RetryPolicy = RetryPolicy {
        attempts: 5,
        first_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(800),
    };

    /// The backoff schedule.
    pub fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::new()
            .with_min_delay(self.first_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.attempts.saturating_sub(1) as usize)
            .with_jitter()
    }
}

/// Runs `call` until it succeeds, fails for a reason that will not go away by itself (see
/// [`CloudError::is_transient`]), or has used `policy`'s attempts. `on_retry` hears of every
/// failure that is retried, with the pause before the next attempt.
pub async fn retry<T, F, Fut>(
    policy: &RetryPolicy,
    call: F,
    on_retry: impl FnMut(&CloudError, Duration),
) -> Result<T, CloudError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CloudError>>,
{
    call.retry(policy.backoff())
        .sleep(tokio::time::sleep)
        .when(CloudError::is_transient)
        .notify(on_retry)
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::CloudErrorKind;

    fn failing(kind: CloudErrorKind) -> CloudError {
        CloudError::new("IMDS meta-data/mac", kind, "no")
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_within_the_budget() {
        let tries = AtomicU32::new(0);
        let mut pauses = Vec::new();
        let out: Result<(), _> = retry(
            &RetryPolicy::IMDS,
            || async {
                tries.fetch_add(1, Ordering::SeqCst);
                Err(failing(CloudErrorKind::Unavailable))
            },
            |_, pause| pauses.push(pause),
        )
        .await;
        assert_eq!(out.unwrap_err().kind, CloudErrorKind::Unavailable);
        assert_eq!(tries.load(Ordering::SeqCst), RetryPolicy::IMDS.attempts);
        assert_eq!(pauses.len(), 4);
        // Doubling from 100 ms, capped at 800 ms, each with up to as much again of jitter.
        for (pause, floor) in pauses.iter().zip([100, 200, 400, 800]) {
            let floor = Duration::from_millis(floor);
            assert!(*pause >= floor && *pause <= floor * 2, "{pauses:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_failure_is_not_retried_and_success_ends_the_retries() {
        let tries = AtomicU32::new(0);
        let out: Result<(), _> = retry(
            &RetryPolicy::IMDS,
            || async {
                tries.fetch_add(1, Ordering::SeqCst);
                Err(failing(CloudErrorKind::NotFound))
            },
            |_, _| panic!("a NotFound is final"),
        )
        .await;
        assert_eq!(out.unwrap_err().kind, CloudErrorKind::NotFound);
        assert_eq!(tries.load(Ordering::SeqCst), 1);

        let tries = AtomicU32::new(0);
        let out = retry(
            &RetryPolicy::IMDS,
            || async {
                match tries.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(failing(CloudErrorKind::Throttled)),
                    n => Ok(n),
                }
            },
            |_, _| {},
        )
        .await;
        assert_eq!(out, Ok(1));
    }
}
