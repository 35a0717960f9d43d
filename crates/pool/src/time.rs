use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Wall-clock time in milliseconds since the Unix epoch. Wall time rather than a monotonic
/// instant because cooldown deadlines are persisted and must mean the same after a restart.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Milliseconds since the epoch.
    pub fn millis(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating.
    pub fn after(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(d.as_millis().min(u64::MAX as u128) as u64),
        )
    }

    /// How long from `self` until `later` (zero if `later` is not later).
    pub fn until(self, later: Timestamp) -> Duration {
        Duration::from_millis(later.0.saturating_sub(self.0))
    }
}

/// The time seam: the daemon passes the system clock, tests a hand-driven one.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Timestamp;
}
