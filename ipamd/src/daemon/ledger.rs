//! The pool and its durability, together: every change to the pool is handed to the store
//! under the pool's lock, so the store never holds a change the pool does not, and an answer
//! goes out only once what it promised is durable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pool::{Mutation, Pool};
use tokio::sync::watch;
use tracing::{error, warn};

use super::lock;
use crate::durability::DaemonStore;
use crate::durability::{Durability, PersistError};

/// The pool, the store behind it, and the growth signal ADDs wait on.
pub(super) struct Ledger<S> {
    pool: Mutex<Pool>,
    durable: Durability<S>,
    /// Set when the store refused a change the pool had made: the next commit writes the whole
    /// pool, so the two agree again.
    store_behind: AtomicBool,
    /// Bumped whenever addresses join the pool: ADDs waiting for growth watch it.
    grown: watch::Sender<u64>,
}

impl<S: DaemonStore> Ledger<S> {
    pub(super) fn new(pool: Pool, store: Arc<S>) -> Self {
        Ledger {
            pool: Mutex::new(pool),
            durable: Durability::new(store),
            store_behind: AtomicBool::new(false),
            grown: watch::Sender::new(0),
        }
    }

    /// The pool, locked. Never held across an await.
    pub(super) fn pool(&self) -> MutexGuard<'_, Pool> {
        lock(&self.pool)
    }

    /// Hands `mutations` (what the caller just did to `pool`, under its lock) to the store.
    /// If the store refused an earlier change, the whole pool is written first, so the store
    /// never stays behind the pool. Returns the batch to wait for.
    pub(super) fn commit(&self, pool: &Pool, mutations: &[Mutation]) -> Result<u64, PersistError> {
        if self.store_behind.load(Ordering::SeqCst) {
            self.durable.replace_all(&pool.to_state())?;
            self.store_behind.store(false, Ordering::SeqCst);
            warn!("the store caught up with the pool after an earlier failure");
        }
        self.durable.apply(mutations).inspect_err(|e| {
            error!(error = %e, "the store refused a change; it will be rewritten whole");
            self.store_behind.store(true, Ordering::SeqCst);
        })
    }

    /// Returns once batch `seq` (and every earlier one) is durable.
    pub(super) async fn wait(&self, seq: u64) -> Result<(), PersistError> {
        self.durable.wait(seq).await
    }

    /// Makes everything applied so far durable.
    pub(super) async fn flush(&self) -> Result<(), PersistError> {
        self.durable.wait(self.durable.seen()).await
    }

    /// Runs `change` on the pool under its lock, commits the mutations it returns, and waits
    /// until they are durable. `change` returns its own result alongside the mutations.
    pub(super) async fn persist<T, X>(
        &self,
        change: impl FnOnce(&mut Pool) -> Result<(T, Vec<Mutation>), X>,
    ) -> Result<T, X>
    where
        X: From<PersistError>,
    {
        let (value, seq) = {
            let mut pool = self.pool();
            let (value, muts) = change(&mut pool)?;
            let seq = self.commit(&pool, &muts)?;
            (value, seq)
        };
        self.wait(seq).await?;
        Ok(value)
    }

    /// Commits `change` and wakes ADDs waiting for addresses when it added any.
    pub(super) async fn persist_growth(
        &self,
        change: impl FnOnce(&mut Pool) -> Vec<Mutation>,
    ) -> Result<(), PersistError> {
        let added = self
            .persist(|pool| {
                let muts = change(pool);
                let added = muts
                    .iter()
                    .any(|m| matches!(m, Mutation::PutAddr(_) | Mutation::PutPrefix6(_)));
                Ok::<_, PersistError>((added, muts))
            })
            .await?;
        if added {
            self.grown.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    /// Changes whenever addresses join the pool (subscribe before looking, so growth in
    /// between is not missed).
    pub(super) fn watch_growth(&self) -> watch::Receiver<u64> {
        self.grown.subscribe()
    }
}
