//! Durable pool state on sled, behind the pool's [`StateStore`] seam.
//!
//! One tree, keys prefixed by record kind, so a batch of mutations is applied atomically
//! (`apply_batch` is atomic per tree). Values are JSON so an operator can read them with any
//! sled tool. A schema marker guards against reading state written by an incompatible build:
//! such state is refused with an error, never overwritten.
//!
//! Damage is survived, not obeyed: [`SledStore::open_recovering`] moves a database sled cannot
//! open aside and starts empty, and reports one that opens empty although it had data (sled
//! silently drops what follows a torn or truncated log); [`SledStore::salvage`] removes
//! records that no longer decode and says what they were. ipamd then rebuilds from EC2, IMDS
//! and the node's routes. sled gives no sign when it drops only part of a log, which is why
//! ipamd checks the node's routes against the store at every start, not only after damage.

pub mod checkpoint;

pub use checkpoint::{
    Checkpoint, CheckpointError, GO_CNI_CHECKPOINT, Imported, SkipReason, SkippedEntry,
    parse_checkpoint, read_checkpoint,
};

use std::fs;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::PermissionsExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::Duration;

use backon::{BlockingRetryable, ConstantBuilder};
use ipnetwork::Ipv6Network;
use pool::{EniInfo, Mutation, PersistedAddr, PersistedAddr6, PersistedState, Prefix6, StateStore};
use thiserror::Error;

/// Written once into a new store; a store with another marker is refused.
pub const SCHEMA: &str = "vpc-cni-state/1";

/// How long [`SledStore::open`] waits for the database's lock.
const LOCK_WAIT: Duration = Duration::from_secs(3);
/// How often the lock is tried again meanwhile.
const LOCK_POLL: Duration = Duration::from_millis(20);

/// Upper bound of sled's page cache.
const CACHE_BYTES: u64 = 4 << 20;

const SCHEMA_KEY: &[u8] = b"meta/schema";
const ENI_PREFIX: &[u8] = b"eni/";
const ADDR_PREFIX: &[u8] = b"ip/";
const PREFIX6_PREFIX: &[u8] = b"pfx6/";
const ADDR6_PREFIX: &[u8] = b"ip6/";

/// A state store failure; each names what it was doing.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The state directory could not be created or opened.
    #[error("opening state at {path}: {source}")]
    Open {
        /// Directory.
        path: PathBuf,
        /// Cause.
        source: OpenCause,
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
    /// Another process holds the database's lock.
    #[error("opening state at {path}: {detail}; is another ipamd using this state directory?")]
    Locked {
        /// Directory.
        path: PathBuf,
        /// sled's words.
        detail: String,
    },
    /// sled failed.
    #[error("state database: {0}")]
    Db(#[from] sled::Error),
}

/// A store that cannot fail (the in-memory one) fails as this one would.
impl From<std::convert::Infallible> for StoreError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

/// Why [`StoreError::Open`] could not open the state directory. Each variant reads as its cause
/// did before, so the message of a failed open stays what operators know.
#[derive(Debug, Error)]
pub enum OpenCause {
    /// Creating the directory or setting its mode failed.
    #[error(transparent)]
    Dir(#[from] std::io::Error),
    /// sled could not open the database.
    #[error(transparent)]
    Sled(#[from] sled::Error),
    /// sled panicked while opening it (it asserts on what it reads back).
    #[error("sled panicked: {0}")]
    Panicked(String),
    /// The database could not be opened, and moving it aside to start empty failed too.
    #[error("{reason}; and moving it aside to {} failed: {source}", .moved_to.display())]
    MoveAside {
        /// Why the database could not be opened.
        reason: String,
        /// Where it was to be moved.
        moved_to: PathBuf,
        /// Why the rename failed.
        #[source]
        source: std::io::Error,
    },
}

/// Pool state in a sled database.
#[derive(Debug)]
pub struct SledStore {
    path: PathBuf,
    db: sled::Db,
    /// The schema marker was written by this open: the store held nothing before.
    created: bool,
}

/// What was wrong with the state a store was opened from, when anything was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// sled could not open the database; it was moved to `moved_to` and an empty store was
    /// made in its place.
    Unopenable {
        /// sled's error (or panic message).
        reason: String,
        /// Where the damaged database now is.
        moved_to: PathBuf,
    },
    /// The database had data on disk but opened without even its schema marker: its log was
    /// truncated or overwritten, and every record is gone.
    Emptied {
        /// Bytes of the database file before opening.
        bytes: u64,
    },
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::Unopenable { reason, moved_to } => write!(
                f,
                "the database could not be opened ({reason}); it was moved to {} and an empty one made",
                moved_to.display()
            ),
            Damage::Emptied { bytes } => write!(
                f,
                "the database file held {bytes} bytes but no record survived opening (truncated or overwritten)"
            ),
        }
    }
}

/// A record [`SledStore::salvage`] could not decode and removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The key, readable (`ip/10.0.0.5`, `eni/eni-0abc`).
    pub key: String,
    /// For an address record, the address its key names: its state is unknown.
    pub ip: Option<Ipv4Addr>,
    /// Why it could not be read.
    pub reason: String,
    /// The stored bytes, lossily as text and cut at [`UNREADABLE_SHOWN`] bytes, for the log.
    pub value: String,
}

/// How much of an unreadable record's value [`Unreadable::value`] keeps.
pub const UNREADABLE_SHOWN: usize = 256;

impl SledStore {
    /// Opens the store in `dir` like [`SledStore::open`], but survives a damaged database:
    /// one sled cannot open is moved aside (never deleted) to `<dir>.corrupt-<unix secs>` and
    /// an empty store is made; one that opens empty although its file had data is reported.
    /// A held lock and another schema are still errors: those are not damage.
    pub fn open_recovering(
        dir: &Path,
        unix_secs: u64,
    ) -> Result<(Self, Option<Damage>), StoreError> {
        let bytes = fs::metadata(dir.join("db")).map(|m| m.len()).unwrap_or(0);
        let reason = match Self::open_guarded(dir) {
            Ok(store) => {
                let emptied = bytes > 0 && store.created;
                return Ok((store, emptied.then_some(Damage::Emptied { bytes })));
            }
            Err(e @ (StoreError::Schema { .. } | StoreError::Locked { .. })) => return Err(e),
            Err(e) => e.to_string(),
        };
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "state".into());
        let moved_to = dir.with_file_name(format!("{name}.corrupt-{unix_secs}"));
        fs::rename(dir, &moved_to).map_err(|source| StoreError::Open {
            path: dir.to_path_buf(),
            source: OpenCause::MoveAside {
                reason: reason.clone(),
                moved_to: moved_to.clone(),
                source,
            },
        })?;
        let store = Self::open(dir)?;
        Ok((store, Some(Damage::Unopenable { reason, moved_to })))
    }

    /// [`SledStore::open`], with a panic inside sled (it has asserts on what it reads back)
    /// turned into an error.
    fn open_guarded(dir: &Path) -> Result<Self, StoreError> {
        catch_unwind(AssertUnwindSafe(|| Self::open(dir))).unwrap_or_else(|panic| {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(StoreError::Open {
                path: dir.to_path_buf(),
                source: OpenCause::Panicked(why),
            })
        })
    }

    /// Removes every record that does not decode (or sits under a key that is not its own),
    /// and returns what each was. Run before [`StateStore::load`], which refuses such records.
    pub fn salvage(&self) -> Result<Vec<Unreadable>, StoreError> {
        let found = &mut (Vec::new(), sled::Batch::default());
        self.salvage_kind(
            ENI_PREFIX,
            |e: &EniInfo| (eni_key(&e.id), e.id.clone()),
            found,
        )?;
        self.salvage_kind(
            ADDR_PREFIX,
            |a: &PersistedAddr| (addr_key(a.ip), a.ip.to_string()),
            found,
        )?;
        self.salvage_kind(
            PREFIX6_PREFIX,
            |p: &Prefix6| (prefix6_key(p.prefix), p.prefix.to_string()),
            found,
        )?;
        self.salvage_kind(
            ADDR6_PREFIX,
            |a: &PersistedAddr6| (addr6_key(a.ip), a.ip.to_string()),
            found,
        )?;
        let (bad, batch) = std::mem::take(found);
        if !bad.is_empty() {
            self.db.apply_batch(batch)?;
            self.db.flush()?;
        }
        Ok(bad)
    }

    /// Finds the records under `prefix` that do not decode as `T` or sit under a key that is
    /// not their own (`identity` gives a record's key and name), and queues their removal.
    fn salvage_kind<T: serde::de::DeserializeOwned>(
        &self,
        prefix: &[u8],
        identity: impl Fn(&T) -> (Vec<u8>, String),
        (bad, batch): &mut (Vec<Unreadable>, sled::Batch),
    ) -> Result<(), StoreError> {
        for item in self.db.scan_prefix(prefix) {
            let (k, v) = item?;
            let reason = match serde_json::from_slice::<T>(&v).map(|r| identity(&r)) {
                Ok((key, _)) if k.as_ref() == key.as_slice() => continue,
                Ok((_, name)) => format!("holds the record of {name}"),
                Err(e) => e.to_string(),
            };
            bad.push(unreadable(&k, &v, reason));
            batch.remove(k);
        }
        Ok(())
    }

    /// Opens (or creates, mode 0700) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let open_err = |source: OpenCause| StoreError::Open {
            path: dir.to_path_buf(),
            source,
        };
        fs::create_dir_all(dir).map_err(|e| open_err(e.into()))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| open_err(e.into()))?;
        let db = open_db(dir).map_err(|e| match e {
            OpenDbError::Locked(detail) => StoreError::Locked {
                path: dir.to_path_buf(),
                detail,
            },
            OpenDbError::Sled(e) => open_err(e.into()),
        })?;
        let mut created = false;
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
                created = true;
            }
        }
        Ok(Self {
            path: dir.to_path_buf(),
            db,
            created,
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
fn open_db(dir: &Path) -> Result<sled::Db, OpenDbError> {
    let open = || {
        // sled's default page cache may grow to 1 GiB; the pool's state is a few kilobytes and
        // ipamd has to stay small.
        match sled::Config::new()
            .path(dir)
            .cache_capacity(CACHE_BYTES)
            .open()
        {
            // sled reports a held lock only in the message of an I/O error.
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                Err(OpenDbError::Locked(e.to_string()))
            }
            other => other.map_err(OpenDbError::Sled),
        }
    };
    open.retry(
        ConstantBuilder::new()
            .with_delay(LOCK_POLL)
            .with_max_times((LOCK_WAIT.as_millis() / LOCK_POLL.as_millis()) as usize),
    )
    .sleep(std::thread::sleep)
    .when(|e| matches!(e, OpenDbError::Locked(_)))
    .call()
}

enum OpenDbError {
    Locked(String),
    Sled(sled::Error),
}

fn eni_key(id: &str) -> Vec<u8> {
    [ENI_PREFIX, id.as_bytes()].concat()
}

fn addr_key(ip: Ipv4Addr) -> Vec<u8> {
    [ADDR_PREFIX, &ip.octets()[..]].concat()
}

fn prefix6_key(prefix: Ipv6Network) -> Vec<u8> {
    [PREFIX6_PREFIX, &prefix.network().octets()[..]].concat()
}

fn addr6_key(ip: Ipv6Addr) -> Vec<u8> {
    [ADDR6_PREFIX, &ip.octets()[..]].concat()
}

/// A key as an operator would write it: address keys hold the four octets.
fn readable_key(key: &[u8]) -> (String, Option<Ipv4Addr>) {
    match key.strip_prefix(ADDR_PREFIX) {
        Some(&[a, b, c, d]) => {
            let ip = Ipv4Addr::new(a, b, c, d);
            (format!("ip/{ip}"), Some(ip))
        }
        _ => {
            let v6 = [(ADDR6_PREFIX, "ip6"), (PREFIX6_PREFIX, "pfx6")]
                .into_iter()
                .find_map(|(prefix, name)| {
                    let octets: [u8; 16] = key.strip_prefix(prefix)?.try_into().ok()?;
                    Some(format!("{name}/{}", Ipv6Addr::from(octets)))
                });
            (
                v6.unwrap_or_else(|| String::from_utf8_lossy(key).into_owned()),
                None,
            )
        }
    }
}

fn unreadable(key: &[u8], value: &[u8], reason: String) -> Unreadable {
    let (key, ip) = readable_key(key);
    Unreadable {
        key,
        ip,
        reason,
        value: String::from_utf8_lossy(&value[..value.len().min(UNREADABLE_SHOWN)]).into_owned(),
    }
}

fn json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Corrupt {
        key: "(new record)".into(),
        reason: e.to_string(),
    })
}

fn decode<T: serde::de::DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Corrupt {
        key: readable_key(key).0,
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
                    key: readable_key(&k).0,
                    reason: format!("holds the record of {}", addr.ip),
                });
            }
            state.addrs.push(addr);
        }
        for item in self.db.scan_prefix(PREFIX6_PREFIX) {
            let (k, v) = item?;
            state.prefixes6.push(decode(&k, &v)?);
        }
        for item in self.db.scan_prefix(ADDR6_PREFIX) {
            let (k, v) = item?;
            state.addrs6.push(decode(&k, &v)?);
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
                Mutation::PutPrefix6(p) => batch.insert(prefix6_key(p.prefix), json(p)?),
                Mutation::DeletePrefix6(p) => batch.remove(prefix6_key(*p)),
                Mutation::PutAddr6(a) => batch.insert(addr6_key(a.ip), json(a)?),
                Mutation::DeleteAddr6(ip) => batch.remove(addr6_key(*ip)),
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
        for prefix in [ENI_PREFIX, ADDR_PREFIX, PREFIX6_PREFIX, ADDR6_PREFIX] {
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
        for p in &state.prefixes6 {
            batch.insert(prefix6_key(p.prefix), json(p)?);
        }
        for a in &state.addrs6 {
            batch.insert(addr6_key(a.ip), json(a)?);
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
    fn ipv6_prefixes_and_addresses_survive_reopening_and_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let mut pool = Pool::new(Duration::from_secs(30));
        let expected = {
            let store = SledStore::open(dir.path()).unwrap();
            let prefix = "2001:db8:0:1:a::/80".parse().unwrap();
            store
                .apply(&pool.v6_mut().add_prefix("eni-0a", prefix).unwrap())
                .unwrap();
            for n in 1..4 {
                let (_, m) = pool
                    .v6_mut()
                    .assign(&key(n), &PodInfo::default(), Timestamp(u64::from(n)))
                    .unwrap();
                store.apply(&m).unwrap();
            }
            let (_, m) = pool.v6_mut().release(&key(2), Timestamp(10)).unwrap();
            store.apply(&m).unwrap();
            store.flush().unwrap();
            pool.to_state()
        };
        let store = SledStore::open(dir.path()).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.prefixes6.len(), 1);
        assert_eq!(loaded.addrs6.len(), 3);
        assert_eq!(loaded, expected);
        // Replacing everything drops IPv6 records the new state lacks.
        store.replace_all(&PersistedState::default()).unwrap();
        assert_eq!(store.load().unwrap(), PersistedState::default());
    }

    #[test]
    fn an_unreadable_ipv6_record_is_salvaged_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let ip: Ipv6Addr = "2001:db8::7".parse().unwrap();
        store
            .db
            .insert(addr6_key(ip), b"{not json".to_vec())
            .unwrap();
        assert!(store.load().is_err());
        let bad = store.salvage().unwrap();
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].key, "ip6/2001:db8::7");
        assert!(store.load().unwrap().addrs6.is_empty());
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

    /// A store with one ENI and three addresses (one assigned), flushed and closed.
    fn written_store(dir: &Path) -> PersistedState {
        let store = SledStore::open(dir).unwrap();
        let mut pool = Pool::new(Duration::from_secs(30));
        store.apply(&pool.upsert_eni(eni())).unwrap();
        let ips: Vec<Ipv4Addr> = (11..14).map(|i| Ipv4Addr::new(10, 0, 0, i)).collect();
        store
            .apply(&pool.add_addresses("eni-0a", &ips).unwrap())
            .unwrap();
        let (_, m) = pool
            .assign(&key(1), &PodInfo::default(), Timestamp(5))
            .unwrap();
        store.apply(&m).unwrap();
        store.flush().unwrap();
        pool.to_state()
    }

    /// Opening waits (up to [`LOCK_WAIT`]) for sled to let go of the lock, which it does from a
    /// background thread after the last handle goes.
    fn reopen_recovering(dir: &Path) -> (SledStore, Option<Damage>) {
        SledStore::open_recovering(dir, 1_700_000_000).unwrap()
    }

    #[test]
    fn an_intact_store_opens_without_damage() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let expected = written_store(&state);
        let (store, damage) = reopen_recovering(&state);
        assert_eq!(damage, None);
        assert_eq!(store.salvage().unwrap(), vec![]);
        assert_eq!(store.load().unwrap(), expected);
    }

    #[test]
    fn a_new_store_is_not_damage() {
        let dir = tempfile::tempdir().unwrap();
        let (store, damage) = reopen_recovering(&dir.path().join("state"));
        assert_eq!(damage, None);
        assert_eq!(store.load().unwrap(), PersistedState::default());
    }

    #[test]
    fn a_truncated_database_is_reported_as_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        written_store(&state);
        let db = state.join("db");
        let bytes = fs::metadata(&db).unwrap().len();
        fs::OpenOptions::new()
            .write(true)
            .open(&db)
            .unwrap()
            .set_len(100)
            .unwrap();
        let (store, damage) = reopen_recovering(&state);
        assert_eq!(damage, Some(Damage::Emptied { bytes: 100 }), "was {bytes}");
        assert_eq!(store.load().unwrap(), PersistedState::default());
    }

    #[test]
    fn an_unopenable_database_is_moved_aside_whole_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        written_store(&state);
        let db_bytes = fs::read(state.join("db")).unwrap();
        fs::write(state.join("conf"), b"\xff\xfe not a sled config").unwrap();
        let (store, damage) = reopen_recovering(&state);
        let moved = dir.path().join("state.corrupt-1700000000");
        match damage {
            Some(Damage::Unopenable { reason, moved_to }) => {
                assert_eq!(moved_to, moved);
                assert!(!reason.is_empty());
            }
            other => panic!("expected Unopenable, got {other:?}"),
        }
        // Nothing is lost: the damaged files are all there, byte for byte.
        assert_eq!(fs::read(moved.join("db")).unwrap(), db_bytes);
        assert_eq!(store.load().unwrap(), PersistedState::default());
        drop(store);
        let (_, again) = reopen_recovering(&state);
        assert_eq!(again, None, "the new store is sound");
    }

    #[test]
    fn another_schema_is_still_refused_when_recovering() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        {
            let db = sled::open(&state).unwrap();
            db.insert(SCHEMA_KEY, b"vpc-cni-state/99".as_slice())
                .unwrap();
            db.flush().unwrap();
        }
        let err = SledStore::open_recovering(&state, 1).unwrap_err();
        assert!(matches!(err, StoreError::Schema { .. }), "{err}");
        assert!(state.join("db").exists(), "left where it was");
        assert!(!dir.path().join("state.corrupt-1").exists());
    }

    #[test]
    fn salvage_removes_and_names_each_unreadable_record() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let mut expected = written_store(&state);
        let store = SledStore::open(&state).unwrap();
        let ip12 = addr_key(Ipv4Addr::new(10, 0, 0, 12));
        let moved = store.db.get(&ip12).unwrap().unwrap();
        store.db.insert(&ip12, b"{\"ip\": tru".as_slice()).unwrap();
        store
            .db
            .insert(addr_key(Ipv4Addr::new(10, 0, 0, 99)), moved)
            .unwrap();
        store
            .db
            .insert(b"eni/eni-bad", b"\x00\x01".as_slice())
            .unwrap();
        assert!(store.load().is_err(), "load refuses what salvage removes");

        let mut bad = store.salvage().unwrap();
        bad.sort_by(|a, b| a.key.cmp(&b.key));
        let summary: Vec<_> = bad
            .iter()
            .map(|u| (u.key.as_str(), u.ip, u.value.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("eni/eni-bad", None, "\u{0}\u{1}"),
                (
                    "ip/10.0.0.12",
                    Some(Ipv4Addr::new(10, 0, 0, 12)),
                    "{\"ip\": tru"
                ),
                (
                    "ip/10.0.0.99",
                    Some(Ipv4Addr::new(10, 0, 0, 99)),
                    bad[2].value.as_str()
                ),
            ]
        );
        assert!(
            bad[2].reason.contains("holds the record of 10.0.0.12"),
            "{:?}",
            bad[2]
        );
        assert!(bad.iter().all(|u| !u.reason.is_empty()));
        // What decodes stays, exactly.
        expected
            .addrs
            .retain(|a| a.ip != Ipv4Addr::new(10, 0, 0, 12));
        assert_eq!(store.load().unwrap(), expected);
        assert_eq!(store.salvage().unwrap(), vec![], "salvage is done once");
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
