//! Group commit: every change is applied to the store at once (cheap, in memory) under the pool
//! lock, and a reply waits until a flush covers it. Concurrent requests share one flush instead
//! of paying an fsync each, which matters when the state lives on a disk rather than tmpfs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pool::{Mutation, PersistedState, StateStore};

/// Tracks which applied changes are durable.
pub struct Durability<S> {
    store: Arc<S>,
    /// Number of change batches applied so far.
    applied: AtomicU64,
    /// Number of batches known durable. Held across a flush, so later callers queue behind it
    /// and usually find their batch already covered.
    durable: tokio::sync::Mutex<u64>,
}

/// The store refused a change or a flush.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// The store's own error.
    #[error("persisting state: {0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The blocking task running the flush failed (panicked or was cancelled).
    #[error("persisting state: flush task: {0}")]
    FlushTask(#[from] tokio::task::JoinError),
}

fn store_error(e: impl std::error::Error + Send + Sync + 'static) -> PersistError {
    PersistError::Store(Box::new(e))
}

impl<S: StateStore + 'static> Durability<S> {
    /// Wraps a store.
    pub fn new(store: Arc<S>) -> Self {
        Self {
            store,
            applied: AtomicU64::new(0),
            durable: tokio::sync::Mutex::new(0),
        }
    }

    /// The store.
    #[cfg(test)]
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// Applies a batch (call under the pool lock so batches reach the store in pool order) and
    /// returns its sequence number for [`Durability::wait`].
    pub fn apply(&self, mutations: &[Mutation]) -> Result<u64, PersistError> {
        if mutations.is_empty() {
            return Ok(self.seen());
        }
        self.store.apply(mutations).map_err(store_error)?;
        Ok(self.applied.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Replaces everything stored with `state` (the store fell behind the pool); counts as an
    /// applied batch, so [`Durability::wait`] covers it.
    pub fn replace_all(&self, state: &PersistedState) -> Result<u64, PersistError> {
        self.store.replace_all(state).map_err(store_error)?;
        Ok(self.applied.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// The sequence number covering everything applied so far: a reply that only read state
    /// waits for this, so it never reports something a crash could still undo.
    pub fn seen(&self) -> u64 {
        self.applied.load(Ordering::SeqCst)
    }

    /// Returns once batch `seq` (and every earlier one) is durable.
    pub async fn wait(&self, seq: u64) -> Result<(), PersistError> {
        let mut durable = self.durable.lock().await;
        if *durable >= seq {
            return Ok(());
        }
        let target = self.applied.load(Ordering::SeqCst);
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || store.flush())
            .await?
            .map_err(store_error)?;
        *durable = target;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use pool::MemoryStore;

    use super::*;

    /// Counts flushes and can be told to fail.
    #[derive(Default)]
    struct CountingStore {
        inner: MemoryStore,
        flushes: AtomicUsize,
        fail: Mutex<bool>,
    }

    impl StateStore for CountingStore {
        type Error = std::io::Error;
        fn load(&self) -> Result<PersistedState, Self::Error> {
            Ok(self.inner.load().unwrap_or_default())
        }
        fn apply(&self, m: &[Mutation]) -> Result<(), Self::Error> {
            let _ = self.inner.apply(m);
            Ok(())
        }
        fn replace_all(&self, s: &PersistedState) -> Result<(), Self::Error> {
            let _ = self.inner.replace_all(s);
            Ok(())
        }
        fn flush(&self) -> Result<(), Self::Error> {
            std::thread::sleep(std::time::Duration::from_millis(20));
            if *self.fail.lock().unwrap() {
                return Err(std::io::Error::other("disk full"));
            }
            self.flushes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    fn mutation(n: u8) -> Vec<Mutation> {
        vec![Mutation::DeleteAddr(std::net::Ipv4Addr::new(10, 0, 0, n))]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_waiters_share_flushes() {
        let d = Arc::new(Durability::new(Arc::new(CountingStore::default())));
        let mut tasks = Vec::new();
        for n in 0..40u8 {
            let d = Arc::clone(&d);
            tasks.push(tokio::spawn(async move {
                let seq = d.apply(&mutation(n)).unwrap();
                d.wait(seq).await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let flushes = d.store().flushes.load(Ordering::SeqCst);
        assert!(
            (1..40).contains(&flushes),
            "40 writers caused {flushes} flushes"
        );
        // Nothing new: no flush needed.
        d.wait(d.seen()).await.unwrap();
        assert_eq!(d.store().flushes.load(Ordering::SeqCst), flushes);
    }

    #[tokio::test]
    async fn a_failed_flush_is_reported_and_retried_later() {
        let d = Durability::new(Arc::new(CountingStore::default()));
        *d.store().fail.lock().unwrap() = true;
        let seq = d.apply(&mutation(1)).unwrap();
        let err = d.wait(seq).await.unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        *d.store().fail.lock().unwrap() = false;
        d.wait(seq).await.unwrap();
        assert_eq!(d.store().flushes.load(Ordering::SeqCst), 1);
    }
}
