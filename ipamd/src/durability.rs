//! Group commit: every change is applied to the store at once (cheap, in memory) under the pool
//! lock, and a reply waits until a flush covers it. Concurrent requests share one flush instead
//! of paying an fsync each, which matters when the state lives on a disk rather than tmpfs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pool::{Mutation, PersistedState, StateStore};
use store::StoreError;

/// A store the daemon can run on: its errors are the state store's (a store that cannot fail,
/// as the in-memory one, converts trivially).
pub trait DaemonStore: StateStore<Error: Into<StoreError>> + 'static {}

impl<S: StateStore<Error: Into<StoreError>> + 'static> DaemonStore for S {}

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
    Store(#[source] StoreError),
    /// The blocking task running the flush failed (panicked or was cancelled).
    #[error("persisting state: flush task: {0}")]
    FlushTask(#[from] tokio::task::JoinError),
}

fn store_error(e: impl Into<StoreError>) -> PersistError {
    PersistError::Store(e.into())
}

impl<S: DaemonStore> Durability<S> {
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
    use std::sync::mpsc;
    use std::time::Duration;

    use pool::MemoryStore;
    use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

    use super::*;

    /// Bounds every wait of these tests: only a hang gets near it.
    const PATIENCE: Duration = Duration::from_secs(10);

    /// Holds each flush until the test lets it finish, so the test decides what happens while
    /// a flush is in progress instead of hoping a slow flush makes requests overlap.
    struct Gate {
        /// Told when a flush starts.
        entered: UnboundedSender<()>,
        /// One message lets one flush finish.
        release: Mutex<mpsc::Receiver<()>>,
    }

    /// The test's side of a [`Gate`].
    struct GateControl {
        entered: UnboundedReceiver<()>,
        release: mpsc::Sender<()>,
    }

    impl GateControl {
        /// Waits (bounded) until a flush has started and holds there.
        async fn flush_started(&mut self) {
            tokio::time::timeout(PATIENCE, self.entered.recv())
                .await
                .expect("no flush started")
                .expect("the store is gone");
        }

        /// Lets the flush in progress finish.
        fn finish_flush(&self) {
            self.release.send(()).expect("the store is gone");
        }
    }

    /// Counts flushes, can be told to fail, and can hold each flush at a [`Gate`].
    #[derive(Default)]
    struct CountingStore {
        inner: MemoryStore,
        flushes: AtomicUsize,
        fail: Mutex<bool>,
        gate: Option<Gate>,
    }

    impl CountingStore {
        fn gated() -> (CountingStore, GateControl) {
            let (entered, entered_rx) = unbounded_channel();
            let (release_tx, release) = mpsc::channel();
            let store = CountingStore {
                gate: Some(Gate {
                    entered,
                    release: Mutex::new(release),
                }),
                ..CountingStore::default()
            };
            let control = GateControl {
                entered: entered_rx,
                release: release_tx,
            };
            (store, control)
        }
    }

    impl StateStore for CountingStore {
        type Error = StoreError;
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
            if let Some(gate) = &self.gate {
                gate.entered.send(()).expect("the test is gone");
                gate.release
                    .lock()
                    .unwrap()
                    .recv_timeout(PATIENCE)
                    .expect("the test never let the flush finish");
            }
            if *self.fail.lock().unwrap() {
                return Err(sled::Error::Io(std::io::Error::other("disk full")).into());
            }
            self.flushes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    fn mutation(n: u8) -> Vec<Mutation> {
        vec![Mutation::DeleteAddr(std::net::Ipv4Addr::new(10, 0, 0, n))]
    }

    #[tokio::test]
    async fn commits_made_during_a_flush_share_the_next_one() {
        const COMMITS: u8 = 40;
        let (store, mut gate) = CountingStore::gated();
        let d = Arc::new(Durability::new(Arc::new(store)));
        let commit = |n: u8| {
            let d = Arc::clone(&d);
            let seq = d.apply(&mutation(n)).unwrap();
            tokio::spawn(async move { d.wait(seq).await.unwrap() })
        };
        // The first commit's flush starts and is held...
        let first = commit(0);
        gate.flush_started().await;
        // ...while the others are applied and wait.
        let rest: Vec<_> = (1..COMMITS).map(commit).collect();
        gate.finish_flush();
        first.await.unwrap();
        // One flush covers every commit applied while the first was in progress.
        gate.flush_started().await;
        gate.finish_flush();
        for waiter in rest {
            waiter.await.unwrap();
        }
        assert_eq!(d.store().flushes.load(Ordering::SeqCst), 2);
        assert_eq!(d.seen(), u64::from(COMMITS));
        // Nothing new: no flush needed.
        d.wait(d.seen()).await.unwrap();
        assert_eq!(d.store().flushes.load(Ordering::SeqCst), 2);
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
