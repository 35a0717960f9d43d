//! Bounded retry of IMDS calls at startup, when the metadata service is throttling or cannot be
//! reached yet. EC2 calls are not wrapped in this: the EC2 client (`cloud::throttle::Throttled`)
//! already retries them with backoff, and retrying both ways would multiply the waits.

use std::future::Future;
use std::time::Duration;

use cloud::{CloudError, CloudErrorKind};
use tracing::warn;

/// Attempts in all, and the first pause (doubling each time): 200+400+800+1600 ms = 3 s of
/// waiting at most, on top of the calls themselves.
const ATTEMPTS: u32 = 5;
const FIRST_PAUSE: Duration = Duration::from_millis(200);

/// Runs `call` until it succeeds, fails for a reason other than an unreachable service, or
/// has been tried [`ATTEMPTS`] times, with doubling pauses between.
pub async fn retry_transient<T, F, Fut>(what: &str, mut call: F) -> Result<T, CloudError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CloudError>>,
{
    let mut pause = FIRST_PAUSE;
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e)
                if attempt < ATTEMPTS
                    && matches!(
                        e.kind,
                        CloudErrorKind::Throttled | CloudErrorKind::Unavailable
                    ) =>
            {
                warn!(call = what, attempt, error = %e, "retrying");
                tokio::time::sleep(pause).await;
                pause *= 2;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
