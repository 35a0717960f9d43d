//! The shared state every server reads: the model, the clock and the IMDS lag.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::clock::Clock;
use crate::model::Model;

/// One simulator: the model behind a lock, the clock that stamps changes, and the IMDS lag.
#[derive(Debug)]
pub struct Sim {
    model: Mutex<Model>,
    clock: Arc<dyn Clock>,
    imds_lag_ms: u64,
}

impl Sim {
    /// Wraps a model.
    pub fn new(model: Model, clock: Arc<dyn Clock>, imds_lag_ms: u64) -> Self {
        Self {
            model: Mutex::new(model),
            clock,
            imds_lag_ms,
        }
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
}
