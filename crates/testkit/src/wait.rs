//! Waiting on a condition instead of sleeping for a guessed time: poll, bounded by a timeout,
//! and fail naming what never happened.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// Polls start fast, for conditions that hold within milliseconds, and slow down to this so a
/// long wait does not hammer what it polls (an HTTP endpoint, `ip`, a process table).
const MAX_PAUSE: Duration = Duration::from_millis(200);

/// The pauses between the polls of one wait: 1 ms doubling up to [`MAX_PAUSE`], until the
/// deadline.
struct Pacer {
    deadline: Instant,
    pause: Duration,
}

impl Pacer {
    fn new(timeout: Duration) -> Pacer {
        Pacer {
            deadline: Instant::now() + timeout,
            pause: Duration::from_millis(1),
        }
    }

    /// The next pause, or `None` once the deadline has passed.
    fn next(&mut self) -> Option<Duration> {
        let left = self.deadline.checked_duration_since(Instant::now())?;
        let pause = self.pause.min(left);
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        Some(pause)
    }
}

/// Polls `probe` until it returns `Ok`, for at most `timeout`; on timeout, its last error.
pub fn poll<T, E>(timeout: Duration, mut probe: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let mut pacer = Pacer::new(timeout);
    loop {
        let last = match probe() {
            Ok(done) => return Ok(done),
            Err(e) => e,
        };
        match pacer.next() {
            Some(pause) => std::thread::sleep(pause),
            None => return Err(last),
        }
    }
}

/// Whether `done` comes to hold within `timeout` (for cleanup, which must not panic).
pub fn within(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    poll(timeout, || if done() { Ok(()) } else { Err(()) }).is_ok()
}

/// Polls `probe` until it returns `Ok`, for at most `timeout`; then panics naming `what` and
/// the last error, which says how far from done it was.
pub fn wait_ok<T, E: Display>(
    timeout: Duration,
    what: &str,
    probe: impl FnMut() -> Result<T, E>,
) -> T {
    poll(timeout, probe)
        .unwrap_or_else(|last| panic!("timed out after {timeout:?} waiting for {what}: {last}"))
}

/// Polls `probe` until it returns `Some`, for at most `timeout`; panics naming `what`.
pub fn wait_for<T>(timeout: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    wait_ok(timeout, what, || probe().ok_or("not yet"))
}

/// Polls `done` until it holds, for at most `timeout`; panics naming `what`.
pub fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    wait_for(timeout, what, || done().then_some(()));
}

/// [`wait_for`] for async tests: `sleep` is the runtime's (e.g. `tokio::time::sleep`), so the
/// runtime keeps running the code under test between polls.
pub async fn wait_for_async<T, S: Future<Output = ()>>(
    timeout: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> Option<T>,
    sleep: impl Fn(Duration) -> S,
) -> T {
    let mut pacer = Pacer::new(timeout);
    loop {
        if let Some(done) = probe().await {
            return done;
        }
        match pacer.next() {
            Some(pause) => sleep(pause).await,
            None => panic!("timed out after {timeout:?} waiting for {what}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_what_the_probe_found_once_it_finds_it() {
        let mut polls = 0;
        let found = wait_for(Duration::from_secs(10), "the third poll", || {
            polls += 1;
            (polls == 3).then_some(polls)
        });
        assert_eq!(found, 3);
    }

    #[test]
    #[should_panic(expected = "waiting for nothing: still 7")]
    fn names_what_never_happened_and_the_last_answer() {
        wait_ok(Duration::ZERO, "nothing", || Err::<(), _>("still 7"));
    }

    #[test]
    fn a_condition_that_never_holds_is_reported() {
        assert!(!within(Duration::from_millis(5), || false));
        assert!(within(Duration::ZERO, || true));
    }

    #[test]
    fn pauses_grow_but_stay_bounded() {
        let mut pacer = Pacer::new(Duration::from_secs(60));
        let pauses: Vec<Duration> = (0..12).filter_map(|_| pacer.next()).collect();
        assert_eq!(pauses[0], Duration::from_millis(1));
        assert!(pauses.windows(2).all(|w| w[0] <= w[1]), "{pauses:?}");
        assert_eq!(pauses.last(), Some(&MAX_PAUSE));
    }
}
