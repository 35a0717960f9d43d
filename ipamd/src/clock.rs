//! The wall clock, behind the pool's clock seam.

use std::time::{SystemTime, UNIX_EPOCH};

use pool::{Clock, Timestamp};

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // Before 1970 only on a broken clock; 0 keeps cooldowns conservative rather than panicking.
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Timestamp(ms)
    }
}
