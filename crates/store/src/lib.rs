//! Durable pool state on sled, behind the pool's [`StateStore`] seam.
//!
//! One tree, keys prefixed by record kind, so a batch of mutations is applied atomically
//! (`apply_batch` is atomic per tree). Values are JSON so an operator can read them with any
//! sled tool. A schema marker guards against reading state written by an incompatible build:
//! such state is refused with an error, never overwritten.

pub mod checkpoint;

pub use checkpoint::{
    Checkpoint, CheckpointError, GO_CNI_CHECKPOINT, Imported, SkipReason, SkippedEntry,
    parse_checkpoint, read_checkpoint,
};

use std::fs;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pool::{EniInfo, Mutation, PersistedAddr, PersistedState, StateStore};
use thiserror::Error;

/// Written once into a new store; a store with another marker is refused.
pub const SCHEMA: &str = "vpc-cni-state/1";

/// How long [`SledStore::open`] waits for the database's lock.
const LOCK_WAIT: Duration = Duration::from_secs(3);

/// Upper bound of sled's page cache.
const CACHE_BYTES: u64 = 4 << 20;

const SCHEMA_KEY: &[u8] = b"meta/schema";
const ENI_PREFIX: &[u8] = b"eni/";
const ADDR_PREFIX: &[u8] = b"ip/";

/// A state store failure; each names what it was doing.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The state directory could not be created or opened.
    #[error("opening state at {path}: {source}")]
    Open {
        /// Directory.
        path: PathBuf,
        /// Cause.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The stored state was written by an incompatible build.
    #[error(
        "state at {path} has schema {found:?}, this build reads {SCHEMA:?}; refusing to touch it"
    )]
    Schema {
        /// Directory.
        path: PathBuf,
        /// What is stored.
        found: String,
    },
    /// A record could not be decoded.
    #[error("state record {key:?} is corrupt: {reason}")]
    Corrupt {
        /// The record's key.
        key: String,
        /// Why.
        reason: String,
    },
    /// sled failed.
    #[error("state database: {0}")]
    Db(#[from] sled::Error),
}

/// Pool state in a sled database.
#[derive(Debug)]
pub struct SledStore {
    path: PathBuf,
    db: sled::Db,
}

impl SledStore {
    /// Opens (or creates, mode 0700) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let open_err = |source: Box<dyn std::error::Error + Send + Sync>| StoreError::Open {
            path: dir.to_path_buf(),
            source,
        };
        fs::create_dir_all(dir).map_err(|e| open_err(e.into()))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| open_err(e.into()))?;
        let db = open_db(dir).map_err(|e| open_err(e.into()))?;
        match db.get(SCHEMA_KEY)? {
            Some(found) if found.as_ref() != SCHEMA.as_bytes() => {
                return Err(StoreError::Schema {
                    path: dir.to_path_buf(),
                    found: String::from_utf8_lossy(&found).into_owned(),
                });
            }
            Some(_) => {}
            None => {
                db.insert(SCHEMA_KEY, SCHEMA.as_bytes())?;
                db.flush()?;
            }
        }
        Ok(Self {
            path: dir.to_path_buf(),
            db,
        })
    }

    /// The state directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Opens the database, waiting up to [`LOCK_WAIT`] for its file lock: sled releases the lock
/// from a background thread after the last handle is dropped, and a previous ipamd may still be
/// exiting, so a held lock is usually a matter of milliseconds.
fn open_db(dir: &Path) -> Result<sled::Db, sled::Error> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // sled's default page cache may grow to 1 GiB; the pool's state is a few kilobytes and
        // ipamd has to stay small.
        match sled::Config::new()
            .path(dir)
            .cache_capacity(CACHE_BYTES)
            .open()
        {
            // sled reports a held lock only in the message of an I/O error.
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                return Err(sled::Error::Io(std::io::Error::other(format!(
                    "{e}; is another ipamd using this state directory?"
                ))));
            }
            other => return other,
        }
    }
}

fn eni_key(id: &str) -> Vec<u8> {
    [ENI_PREFIX, id.as_bytes()].concat()
}

fn addr_key(ip: Ipv4Addr) -> Vec<u8> {
    [ADDR_PREFIX, &ip.octets()[..]].concat()
}

fn json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Corrupt {
        key: "(new record)".into(),
        reason: e.to_string(),
    })
}

fn decode<T: serde::de::DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: e.to_string(),
    })
}

impl StateStore for SledStore {
    type Error = StoreError;

    fn load(&self) -> Result<PersistedState, StoreError> {
        let mut state = PersistedState::default();
        for item in self.db.scan_prefix(ENI_PREFIX) {
            let (k, v) = item?;
            state.enis.push(decode::<EniInfo>(&k, &v)?);
        }
        for item in self.db.scan_prefix(ADDR_PREFIX) {
            let (k, v) = item?;
            let addr: PersistedAddr = decode(&k, &v)?;
            if k.as_ref() != addr_key(addr.ip).as_slice() {
                return Err(StoreError::Corrupt {
                    key: String::from_utf8_lossy(&k).into_owned(),
                    reason: format!("holds the record of {}", addr.ip),
                });
            }
            state.addrs.push(addr);
        }
        Ok(state)
    }

    fn apply(&self, mutations: &[Mutation]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for m in mutations {
            match m {
                Mutation::PutEni(e) => batch.insert(eni_key(&e.id), json(e)?),
                Mutation::DeleteEni(id) => batch.remove(eni_key(id)),
                Mutation::PutAddr(a) => batch.insert(addr_key(a.ip), json(a)?),
                Mutation::DeleteAddr(ip) => batch.remove(addr_key(*ip)),
            }
        }
        self.db.apply_batch(batch)?;
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }

    fn replace_all(&self, state: &PersistedState) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for prefix in [ENI_PREFIX, ADDR_PREFIX] {
            for item in self.db.scan_prefix(prefix) {
                batch.remove(item?.0);
            }
        }
        for e in &state.enis {
            batch.insert(eni_key(&e.id), json(e)?);
        }
        for a in &state.addrs {
            batch.insert(addr_key(a.ip), json(a)?);
        }
        self.db.apply_batch(batch)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pool::{AttachmentKey, PodInfo, Pool, Timestamp};

    use super::*;

    fn eni() -> EniInfo {
        EniInfo {
            id: "eni-0a".into(),
            device_number: 0,
            mac: "02:00:00:00:00:01".into(),
            primary_ip: "10.0.0.10".parse().unwrap(),
            subnet_id: "subnet-1".into(),
            subnet_cidr: "10.0.0.0/24".parse().unwrap(),
            created_at: Timestamp(1),
        }
    }

    fn key(n: u32) -> AttachmentKey {
        AttachmentKey {
            network: "aws-cni".into(),
            container_id: format!("c{n}"),
            ifname: "eth0".into(),
        }
    }

    #[test]
    fn state_survives_reopening_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let cooldown = Duration::from_secs(30);
        let mut pool = Pool::new(cooldown);
        let expected = {
            let store = SledStore::open(dir.path()).unwrap();
            store.apply(&pool.upsert_eni(eni())).unwrap();
            let ips: Vec<Ipv4Addr> = (11..15).map(|i| Ipv4Addr::new(10, 0, 0, i)).collect();
            store
                .apply(&pool.add_addresses("eni-0a", &ips).unwrap())
                .unwrap();
            store
                .apply(
                    &pool
                        .assign(&key(1), &PodInfo::default(), Timestamp(100))
                        .unwrap()
                        .1,
                )
                .unwrap();
            store
                .apply(
                    &pool
                        .assign(&key(2), &PodInfo::default(), Timestamp(101))
                        .unwrap()
                        .1,
                )
                .unwrap();
            store
                .apply(&pool.release(&key(2), Timestamp(102)).unwrap().1)
                .unwrap();
            store
                .apply(
                    &pool
                        .remove_address(Ipv4Addr::new(10, 0, 0, 14), pool::Removal::Force)
                        .unwrap()
                        .1,
                )
                .unwrap();
            store.flush().unwrap();
            pool.to_state()
        };
        let store = SledStore::open(dir.path()).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded, expected);
        let (restored, fixes, issues) = Pool::restore(loaded, cooldown);
        assert!(fixes.is_empty() && issues.is_empty());
        assert_eq!(restored.get(&key(1)), pool.get(&key(1)));
        assert_eq!(restored.counts(Timestamp(103)).cooling, 1);
    }

    #[test]
    fn another_schema_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path()).unwrap();
            db.insert(SCHEMA_KEY, b"vpc-cni-state/99".as_slice())
                .unwrap();
            db.insert(b"eni/x", b"keep me".as_slice()).unwrap();
            db.flush().unwrap();
        }
        let err = SledStore::open(dir.path()).unwrap_err();
        assert!(err.to_string().contains("vpc-cni-state/99"), "{err}");
        let db = sled::open(dir.path()).unwrap();
        assert_eq!(db.get(b"eni/x").unwrap().unwrap().as_ref(), b"keep me");
    }

    #[test]
    fn a_corrupt_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        store
            .db
            .insert(b"eni/eni-bad", b"{not json".as_slice())
            .unwrap();
        let err = store.load().unwrap_err();
        assert!(err.to_string().contains("eni/eni-bad"), "{err}");
    }

    #[test]
    fn a_held_lock_is_waited_for_and_then_named() {
        let dir = tempfile::tempdir().unwrap();
        let first = SledStore::open(dir.path()).unwrap();
        let err = SledStore::open(dir.path()).unwrap_err();
        assert!(err.to_string().contains("another ipamd"), "{err}");
        drop(first);
        // Released by sled's background thread shortly after the drop.
        SledStore::open(dir.path()).expect("reopened once the lock is free");
    }

    #[test]
    fn replace_all_makes_the_store_exactly_the_given_state() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let mut pool = Pool::new(Duration::from_secs(30));
        store.apply(&pool.upsert_eni(eni())).unwrap();
        let ips: Vec<Ipv4Addr> = (11..14).map(|i| Ipv4Addr::new(10, 0, 0, i)).collect();
        store
            .apply(&pool.add_addresses("eni-0a", &ips).unwrap())
            .unwrap();
        // The pool moves on without the store...
        pool.remove_address(ips[0], pool::Removal::Force).unwrap();
        pool.assign(&key(1), &PodInfo::default(), Timestamp(5))
            .unwrap();
        // ...and one write brings them together again.
        store.replace_all(&pool.to_state()).unwrap();
        assert_eq!(store.load().unwrap(), pool.to_state());
    }

    #[test]
    fn the_directory_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        SledStore::open(&state).unwrap();
        let mode = fs::metadata(&state).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }
}
