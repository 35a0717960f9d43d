//! Opening the state store at startup without obeying damage: what cannot be read is moved
//! aside or removed, named in the log, and reported as lost so the daemon rebuilds it from
//! EC2, IMDS and the node's routes.

use std::path::Path;

use pool::Timestamp;
use store::{SledStore, StoreError};
use tracing::error;

use crate::daemon::LostState;

/// Opens the store in `dir` at `now`: a database sled cannot open is moved aside, an emptied
/// one is reported, and unreadable records are removed; each is logged with what it held.
/// Fails only when the state is not damage (a held lock, another build's schema) or the
/// directory cannot be used at all.
pub fn open_state(dir: &Path, now: Timestamp) -> Result<(SledStore, LostState), StoreError> {
    let (store, damage) = SledStore::open_recovering(dir, now.0 / 1000)?;
    let mut lost = LostState::default();
    if let Some(damage) = damage {
        error!(
            dir = %dir.display(),
            "stored state lost: {damage}; every assignment and cooldown is rebuilt from EC2, IMDS and the node's routes, and the pods' names and containers are not recoverable"
        );
        lost.everything = true;
    }
    for bad in store.salvage()? {
        error!(
            key = %bad.key, reason = %bad.reason, value = %bad.value,
            "removed an unreadable state record; what it held is not recoverable"
        );
        lost.ips.extend(bad.ip);
    }
    Ok((store, lost))
}
