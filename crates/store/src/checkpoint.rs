//! Reading the Go CNI's IPAM checkpoint (`vpc-cni-ipam/1`), so a node that ran `aws-node` keeps
//! its pods' addresses when ipamd replaces it.
//!
//! The file is `{"version":"vpc-cni-ipam/1","allocations":[entry, ...]}`; an entry inlines the
//! IPAM key (`networkName`, `containerID`, `ifName`), carries `ipv4` or `ipv6` (each omitted
//! when empty), `allocationTimestamp` (Unix nanoseconds) and `metadata`
//! (`k8sPodNamespace`/`k8sPodName`, each omitted when empty; writers before 1.10 had no
//! metadata and no timestamp at all). Unknown keys are ignored, as Go's decoder does.
//!
//! The document as a whole must be right (JSON object, known version): anything else is an
//! error, because guessing at a file we do not understand could hand one address to two pods.
//! A single bad entry only costs that entry: it is reported in [`Checkpoint::skipped`] and the
//! rest are imported.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use pool::{AttachmentKey, PodInfo, Timestamp};
use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

/// Where the Go CNI keeps its checkpoint (`AWS_VPC_K8S_CNI_BACKING_STORE`'s default).
pub const GO_CNI_CHECKPOINT: &str = "/var/run/aws-node/ipam.json";

/// The only format version this module reads.
pub const GO_CNI_CHECKPOINT_VERSION: &str = "vpc-cni-ipam/1";

/// Largest checkpoint [`read_checkpoint`] accepts. A real one is about 250 bytes per pod, so
/// this is tens of thousands of pods; anything bigger is not a checkpoint.
pub const MAX_CHECKPOINT_BYTES: u64 = 16 << 20;

/// One allocation taken over from the Go CNI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Imported {
    /// The attachment the address belongs to.
    pub key: AttachmentKey,
    /// The pod's address.
    pub ip: Ipv4Addr,
    /// The pod; `infra_container_id` is the container id, `uid` and `netns` are unknown (empty).
    pub pod: PodInfo,
    /// When the Go CNI assigned it. `Timestamp(0)` when the entry has no usable timestamp
    /// (absent, zero, or Go's zero time, which encodes as a negative number): such an entry is
    /// at least as old as the file, and an old assignment is what makes the startup reclaim
    /// check it for a live route instead of trusting it as fresh.
    pub assigned_at: Timestamp,
}

/// Why an entry was not imported.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SkipReason {
    /// An IPv6 allocation (ipamd serves IPv4 clusters only).
    #[error("IPv6 address {address:?} (only IPv4 is supported)")]
    Ipv6 {
        /// The address as written.
        address: String,
    },
    /// Neither `ipv4` nor `ipv6` is set.
    #[error("no ipv4 or ipv6 address")]
    NoAddress,
    /// `ipv4` is not a dotted-quad IPv4 address.
    #[error("ipv4 {value:?} is not an IPv4 address")]
    BadAddress {
        /// The value as written.
        value: String,
    },
    /// A part of the IPAM key is missing or empty (the Go CNI treats an empty key as "not
    /// assigned", and a key part is needed to find the attachment again on DEL).
    #[error("{field} is missing or empty")]
    EmptyKeyField {
        /// `networkName`, `containerID` or `ifName`.
        field: &'static str,
    },
    /// Another entry, earlier in the file, has the same address.
    #[error("address {ip} is already held by entry {first}")]
    DuplicateIp {
        /// The address.
        ip: Ipv4Addr,
        /// Index of the entry that was kept.
        first: usize,
    },
    /// Another entry, earlier in the file, has the same IPAM key.
    #[error("attachment {key} already has an address from entry {first}")]
    DuplicateKey {
        /// The key.
        key: AttachmentKey,
        /// Index of the entry that was kept.
        first: usize,
    },
    /// The entry is not an object or a field has the wrong type.
    #[error("malformed entry: {reason}")]
    Malformed {
        /// serde's description of the problem.
        reason: String,
    },
}

/// An entry of `allocations` that was not imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedEntry {
    /// Position in `allocations` (0-based).
    pub index: usize,
    /// The entry's `containerID` when it has a readable one, for the operator's log.
    pub container_id: Option<String>,
    /// Why it was skipped.
    pub reason: SkipReason,
}

impl fmt::Display for SkippedEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "checkpoint entry {}", self.index)?;
        if let Some(id) = &self.container_id {
            write!(f, " (container {id})")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// The usable content of a Go CNI checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Allocations to take over, in file order.
    pub imported: Vec<Imported>,
    /// Entries left out, in file order.
    pub skipped: Vec<SkippedEntry>,
}

/// A checkpoint that cannot be read as a whole. Each variant names the file when it came from
/// one.
#[derive(Debug, Error)]
pub enum CheckpointError {
    /// The file exists but could not be read.
    #[error("reading Go CNI checkpoint {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// The file is bigger than [`MAX_CHECKPOINT_BYTES`].
    #[error(
        "Go CNI checkpoint {} is larger than {limit} bytes; refusing to read it",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// Not JSON (including a file cut short).
    #[error("{}is not valid JSON: {reason}", origin(path))]
    NotJson {
        /// The file, if read from one.
        path: Option<PathBuf>,
        /// serde's message, with line and column.
        reason: String,
    },
    /// JSON, but not shaped like a checkpoint.
    #[error("{}is not a Go CNI checkpoint: {reason}", origin(path))]
    Shape {
        /// The file, if read from one.
        path: Option<PathBuf>,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint of a version this build does not read.
    #[error(
        "{}has version {found:?}, this build reads only {GO_CNI_CHECKPOINT_VERSION:?}",
        origin(path)
    )]
    Version {
        /// The file, if read from one.
        path: Option<PathBuf>,
        /// The version found.
        found: String,
    },
}

fn origin(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => format!("Go CNI checkpoint {} ", p.display()),
        None => "Go CNI checkpoint ".to_string(),
    }
}

/// One allocation as written; every field optional so that a missing one is reported as a
/// skip reason rather than a serde error.
#[derive(Deserialize)]
struct RawEntry {
    #[serde(rename = "networkName")]
    network_name: Option<String>,
    #[serde(rename = "containerID")]
    container_id: Option<String>,
    #[serde(rename = "ifName")]
    if_name: Option<String>,
    ipv4: Option<String>,
    ipv6: Option<String>,
    #[serde(rename = "allocationTimestamp")]
    allocation_timestamp: Option<serde_json::Number>,
    metadata: Option<RawMetadata>,
}

#[derive(Deserialize, Default)]
struct RawMetadata {
    #[serde(rename = "k8sPodNamespace")]
    namespace: Option<String>,
    #[serde(rename = "k8sPodName")]
    name: Option<String>,
}

/// Parses a checkpoint's bytes.
///
/// Errors: not JSON, not an object, `version` missing or not a string, a version other than
/// [`GO_CNI_CHECKPOINT_VERSION`], `allocations` present but not an array. A missing or null
/// `allocations` means none (Go's decoder reads it so). Entries that cannot be used are listed
/// in [`Checkpoint::skipped`]; of two entries with the same address or the same key the first
/// is kept.
pub fn parse_checkpoint(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
    parse(bytes, None)
}

/// Reads and parses the checkpoint at `path`; `Ok(None)` when there is no such file (a node
/// that never ran the Go CNI, or one that rebooted since).
pub fn read_checkpoint(path: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    let read_err = |source| CheckpointError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_err(e)),
    };
    let too_large = || CheckpointError::TooLarge {
        path: path.to_path_buf(),
        limit: MAX_CHECKPOINT_BYTES,
    };
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(read_err(io::Error::other("not a regular file")));
    }
    if meta.len() > MAX_CHECKPOINT_BYTES {
        return Err(too_large());
    }
    // The size can change between the check and the read; reading one byte past the limit
    // catches a file that grew.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_CHECKPOINT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_CHECKPOINT_BYTES {
        return Err(too_large());
    }
    parse(&bytes, Some(path)).map(Some)
}

fn parse(bytes: &[u8], path: Option<&Path>) -> Result<Checkpoint, CheckpointError> {
    let path = || path.map(Path::to_path_buf);
    let shape = |reason: &str| CheckpointError::Shape {
        path: path(),
        reason: reason.to_string(),
    };
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| CheckpointError::NotJson {
        path: path(),
        reason: e.to_string(),
    })?;
    let Value::Object(doc) = doc else {
        return Err(shape("the top level is not a JSON object"));
    };
    match doc.get("version") {
        None => return Err(shape("it has no \"version\"")),
        Some(Value::String(v)) if v == GO_CNI_CHECKPOINT_VERSION => {}
        Some(Value::String(v)) => {
            return Err(CheckpointError::Version {
                path: path(),
                found: v.clone(),
            });
        }
        Some(_) => return Err(shape("\"version\" is not a string")),
    }
    let entries: &[Value] = match doc.get("allocations") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(a)) => a,
        Some(_) => return Err(shape("\"allocations\" is not an array")),
    };

    let mut out = Checkpoint::default();
    let mut by_ip: HashMap<Ipv4Addr, usize> = HashMap::new();
    let mut by_key: HashMap<AttachmentKey, usize> = HashMap::new();
    for (index, value) in entries.iter().enumerate() {
        let container_id = value
            .get("containerID")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let skip = |reason| SkippedEntry {
            index,
            container_id: container_id.clone(),
            reason,
        };
        let imported = match entry(value) {
            Ok(imported) => imported,
            Err(reason) => {
                out.skipped.push(skip(reason));
                continue;
            }
        };
        if let Some(&first) = by_ip.get(&imported.ip) {
            out.skipped.push(skip(SkipReason::DuplicateIp {
                ip: imported.ip,
                first,
            }));
            continue;
        }
        match by_key.entry(imported.key.clone()) {
            Entry::Occupied(o) => {
                out.skipped.push(skip(SkipReason::DuplicateKey {
                    key: imported.key,
                    first: *o.get(),
                }));
                continue;
            }
            Entry::Vacant(v) => {
                v.insert(index);
            }
        }
        by_ip.insert(imported.ip, index);
        out.imported.push(imported);
    }
    Ok(out)
}

/// Turns one entry into an allocation, or says why it cannot be one.
fn entry(value: &Value) -> Result<Imported, SkipReason> {
    let raw = RawEntry::deserialize(value).map_err(|e| SkipReason::Malformed {
        reason: e.to_string(),
    })?;
    let non_empty = |v: Option<String>, field: &'static str| {
        v.filter(|s| !s.is_empty())
            .ok_or(SkipReason::EmptyKeyField { field })
    };
    let ipv4 = raw.ipv4.filter(|s| !s.is_empty());
    let ipv6 = raw.ipv6.filter(|s| !s.is_empty());
    // The Go CNI in IPv4 mode reads only `ipv4`, so an entry with both is an IPv4 entry.
    let ip = match (ipv4, ipv6) {
        (Some(v4), _) => v4
            .parse::<Ipv4Addr>()
            .map_err(|_| SkipReason::BadAddress { value: v4 })?,
        (None, Some(address)) => return Err(SkipReason::Ipv6 { address }),
        (None, None) => return Err(SkipReason::NoAddress),
    };
    let key = AttachmentKey {
        network: non_empty(raw.network_name, "networkName")?,
        container_id: non_empty(raw.container_id, "containerID")?,
        ifname: non_empty(raw.if_name, "ifName")?,
    };
    let meta = raw.metadata.unwrap_or_default();
    let pod = PodInfo {
        namespace: meta.namespace.unwrap_or_default(),
        name: meta.name.unwrap_or_default(),
        infra_container_id: key.container_id.clone(),
        ..PodInfo::default()
    };
    Ok(Imported {
        key,
        ip,
        pod,
        assigned_at: timestamp(raw.allocation_timestamp.as_ref())?,
    })
}

/// Unix nanoseconds to [`Timestamp`] milliseconds; absent or negative means the epoch.
fn timestamp(nanos: Option<&serde_json::Number>) -> Result<Timestamp, SkipReason> {
    let Some(n) = nanos else {
        return Ok(Timestamp(0));
    };
    if let Some(u) = n.as_u64() {
        return Ok(Timestamp(u / 1_000_000));
    }
    if n.as_i64().is_some() {
        return Ok(Timestamp(0));
    }
    Err(SkipReason::Malformed {
        reason: format!("allocationTimestamp {n} is not a whole number of nanoseconds"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(entry: &str) -> Checkpoint {
        let doc = format!(r#"{{"version":"vpc-cni-ipam/1","allocations":[{entry}]}}"#);
        parse_checkpoint(doc.as_bytes()).unwrap()
    }

    #[test]
    fn timestamps_convert_to_millis() {
        let c = one(
            r#"{"networkName":"aws-cni","containerID":"c","ifName":"eth0","ipv4":"10.0.0.1",
                "allocationTimestamp":1700000000123456789}"#,
        );
        assert_eq!(c.imported[0].assigned_at, Timestamp(1_700_000_000_123));
    }

    #[test]
    fn go_zero_time_and_absent_timestamp_are_the_epoch() {
        for ts in [r#","allocationTimestamp":-6795364578871345152"#, ""] {
            let c = one(&format!(
                r#"{{"networkName":"aws-cni","containerID":"c","ifName":"eth0","ipv4":"10.0.0.1"{ts}}}"#
            ));
            assert_eq!(c.imported[0].assigned_at, Timestamp(0), "{ts}");
        }
    }

    #[test]
    fn fractional_timestamp_skips_the_entry() {
        let c = one(
            r#"{"networkName":"aws-cni","containerID":"c","ifName":"eth0","ipv4":"10.0.0.1",
                "allocationTimestamp":1.5}"#,
        );
        assert!(c.imported.is_empty());
        assert!(matches!(c.skipped[0].reason, SkipReason::Malformed { .. }));
    }

    #[test]
    fn wrong_field_type_is_malformed_and_names_the_container() {
        let c = one(r#"{"networkName":7,"containerID":"abc","ifName":"eth0","ipv4":"10.0.0.1"}"#);
        let s = &c.skipped[0];
        assert_eq!(s.container_id.as_deref(), Some("abc"));
        let text = s.to_string();
        assert!(
            text.starts_with("checkpoint entry 0 (container abc): malformed entry"),
            "{text}"
        );
    }

    #[test]
    fn ipv4_wins_over_ipv6_in_the_same_entry() {
        let c = one(
            r#"{"networkName":"aws-cni","containerID":"c","ifName":"eth0","ipv4":"10.0.0.1",
                "ipv6":"2001:db8::1"}"#,
        );
        assert_eq!(c.imported[0].ip, Ipv4Addr::new(10, 0, 0, 1));
    }

    #[test]
    fn top_level_shapes_are_errors() {
        for (doc, needle) in [
            ("[]", "top level is not a JSON object"),
            (r#"{"allocations":[]}"#, "has no \"version\""),
            (r#"{"version":1}"#, "\"version\" is not a string"),
            (
                r#"{"version":"vpc-cni-ipam/1","allocations":{}}"#,
                "\"allocations\" is not an array",
            ),
        ] {
            let e = parse_checkpoint(doc.as_bytes()).unwrap_err();
            assert!(matches!(e, CheckpointError::Shape { .. }), "{doc}: {e:?}");
            assert!(e.to_string().contains(needle), "{doc}: {e}");
        }
    }

    #[test]
    fn absent_or_null_allocations_mean_none() {
        for doc in [
            r#"{"version":"vpc-cni-ipam/1"}"#,
            r#"{"version":"vpc-cni-ipam/1","allocations":null}"#,
        ] {
            assert_eq!(
                parse_checkpoint(doc.as_bytes()).unwrap(),
                Checkpoint::default()
            );
        }
    }
}
