//! The request configuration on stdin: spec keys, our plugin's keys, GC's attachment list.

use std::collections::HashSet;

use serde_json::Value;

use crate::env::Command;
use crate::error::CniError;
use crate::json::{Object, as_object, describe, field, opt_array, opt_str};
use crate::result::CniResult;
use crate::settings::{
    DEFAULT_MTU, DEFAULT_VETH_PREFIX, SettingError, check_mtu, check_veth_prefix,
};
use crate::validate::validate_network_name;
use crate::version::{CniVersion, incompatible};

/// Default `ipamdSocket`.
pub const DEFAULT_IPAMD_SOCKET: &str = "/run/vpc-cni/ipamd.sock";
/// GC's valid-attachment key on libcni main (and sent by libcni).
pub const VALID_ATTACHMENTS_KEY: &str = "cni.dev/valid-attachments";
/// The same list under the name the 1.1.0 spec tag used; libcni sends both.
pub const LEGACY_ATTACHMENTS_KEY: &str = "cni.dev/attachments";

/// One `(containerID, ifname)` pair from GC's valid-attachment list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attachment {
    /// `containerID`.
    pub container_id: String,
    /// `ifname`.
    pub ifname: String,
}

/// The plugin's request configuration, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    /// `cniVersion`: the protocol version for this call and for the result we print.
    pub cni_version: CniVersion,
    /// `name`: the network name (empty only when parsed for VERSION).
    pub name: String,
    /// `type`: our binary's name as the conflist says it; empty when absent.
    pub plugin_type: String,
    /// `ipamdSocket`: the daemon's Unix socket.
    pub ipamd_socket: String,
    /// `mtu`: pod interface MTU (accepts a JSON number or a decimal string).
    pub mtu: u32,
    /// `vethPrefix`: host-side veth name prefix.
    pub veth_prefix: String,
    /// `pluginLogFile`.
    pub plugin_log_file: Option<String>,
    /// `pluginLogLevel`.
    pub plugin_log_level: Option<String>,
    /// `pluginLogMaxSize` as written (a JSON number or string, shown as text; other JSON as
    /// its JSON). Not checked here: a logging setting never fails a request, so the plugin
    /// reads it and falls back to the default with a warning.
    pub plugin_log_max_size: Option<String>,
    /// `pluginLogMaxFiles`, as [`Self::plugin_log_max_size`].
    pub plugin_log_max_files: Option<String>,
    /// `prevResult`, decoded as a result of `cni_version`.
    pub prev_result: Option<CniResult>,
    /// Why a `prevResult` that was sent is `None` in [`Self::prev_result`]: set only for DEL,
    /// which must not fail over a cached result it cannot read (libcni itself treats a corrupt
    /// cache entry as no `prevResult`), so the caller can log it and go on without one.
    pub prev_result_problem: Option<String>,
    /// `runtimeConfig` as given (capability args).
    pub runtime_config: Option<Value>,
    /// GC's valid attachments: the union of `cni.dev/valid-attachments` and
    /// `cni.dev/attachments`, first occurrence order, no duplicates. `None` when neither key is
    /// present, which a GC must not read as "no attachment is valid".
    pub valid_attachments: Option<Vec<Attachment>>,
}

impl NetConf {
    /// Parses and validates the stdin config for `command`, in skel's order: JSON, `name`,
    /// `cniVersion` (and the verb's minimum version), then our keys and `prevResult`.
    ///
    /// Errors: malformed JSON or a non-object, or a non-string `name`/`cniVersion` -> 6
    /// (serde's message included); missing/invalid `name` -> 7 (not checked for VERSION);
    /// missing or unsupported `cniVersion` -> 1 ("incompatible CNI versions", a missing one
    /// means 0.1.0 as in libcni); CHECK below 0.4.0 and STATUS/GC below 1.1.0 -> 1
    /// ("config version X does not allow CHECK"); a bad `mtu`, `vethPrefix`, `ipamdSocket` or
    /// other plugin key -> 7 naming key and value; a bad `prevResult` or attachment list -> 6,
    /// except that on DEL a bad `prevResult` is dropped and described in
    /// [`Self::prev_result_problem`] instead.
    /// Unknown keys are ignored. VERSION does not need this: skel ignores VERSION's stdin, see
    /// [`crate::parse_version_request`].
    pub fn parse(stdin: &[u8], command: Command) -> Result<NetConf, CniError> {
        let value: Value = serde_json::from_slice(stdin).map_err(|e| {
            CniError::decoding_failure(format!("error unmarshalling network config: {e}"))
        })?;
        let obj = as_object(&value, "network config").map_err(CniError::decoding_failure)?;

        let name = opt_str(obj, "name", "").map_err(CniError::decoding_failure)?;
        let name = name.unwrap_or("").to_owned();
        if command != Command::Version {
            validate_network_name(&name)?;
        }

        let cni_version = conf_version(obj, command)?;
        let invalid = CniError::invalid_config;
        let (prev_result, prev_result_problem) = match field(obj, "prevResult") {
            None => (None, None),
            Some(v) => match CniResult::from_json(v, cni_version) {
                Ok(prev) => (Some(prev), None),
                Err(e) => {
                    let problem = format!("could not parse prevResult: {}", e.msg);
                    if command != Command::Del {
                        return Err(CniError::decoding_failure(problem));
                    }
                    (None, Some(problem))
                }
            },
        };

        Ok(NetConf {
            cni_version,
            name,
            plugin_type: opt_str(obj, "type", "")
                .map_err(invalid)?
                .unwrap_or("")
                .to_owned(),
            ipamd_socket: ipamd_socket(obj)?,
            mtu: mtu(obj)?,
            veth_prefix: veth_prefix(obj)?,
            plugin_log_file: opt_str(obj, "pluginLogFile", "")
                .map_err(invalid)?
                .map(str::to_owned),
            plugin_log_level: opt_str(obj, "pluginLogLevel", "")
                .map_err(invalid)?
                .map(str::to_owned),
            plugin_log_max_size: as_text(obj, "pluginLogMaxSize"),
            plugin_log_max_files: as_text(obj, "pluginLogMaxFiles"),
            prev_result,
            prev_result_problem,
            runtime_config: field(obj, "runtimeConfig").cloned(),
            valid_attachments: valid_attachments(obj).map_err(CniError::decoding_failure)?,
        })
    }

    /// A CRI pod annotation passed through `runtimeConfig."io.kubernetes.cri.pod-annotations"`.
    pub fn pod_annotation(&self, key: &str) -> Option<&str> {
        self.runtime_config
            .as_ref()?
            .get("io.kubernetes.cri.pod-annotations")?
            .get(key)?
            .as_str()
    }
}

/// A key's value as text whatever its JSON type, for settings checked by their user.
fn as_text(obj: &Object, key: &str) -> Option<String> {
    Some(match field(obj, key)? {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => describe(other),
    })
}

fn conf_version(obj: &Object, command: Command) -> Result<CniVersion, CniError> {
    let raw = opt_str(obj, "cniVersion", "").map_err(CniError::decoding_failure)?;
    let version = match raw {
        None | Some("") => {
            return Err(CniError::incompatible_version(format!(
                "incompatible CNI versions: config has no cniVersion (which means \"0.1.0\"), plugin supports {:?}",
                crate::version::SUPPORTED_VERSIONS
            )));
        }
        Some(s) => CniVersion::parse(s).ok_or_else(|| incompatible(s))?,
    };
    let (allowed, needs) = match command {
        Command::Check => (version.supports_check(), CniVersion::V0_4_0),
        Command::Status | Command::Gc => (version.supports_status_gc(), CniVersion::V1_1_0),
        _ => (true, version),
    };
    if !allowed {
        return Err(CniError::incompatible_version(format!(
            "config version {version} does not allow {command} (needs {needs} or later)"
        )));
    }
    Ok(version)
}

fn ipamd_socket(obj: &Object) -> Result<String, CniError> {
    match opt_str(obj, "ipamdSocket", "").map_err(CniError::invalid_config)? {
        None => Ok(DEFAULT_IPAMD_SOCKET.to_owned()),
        Some("") => Err(CniError::invalid_config("ipamdSocket must not be empty")),
        Some(s) => Ok(s.to_owned()),
    }
}

fn mtu(obj: &Object) -> Result<u32, CniError> {
    let Some(v) = field(obj, "mtu") else {
        return Ok(DEFAULT_MTU);
    };
    let parsed = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse::<u64>().ok(),
        _ => None,
    };
    parsed
        .ok_or(SettingError::Mtu)
        .and_then(check_mtu)
        .map_err(|e| {
            CniError::invalid_config(format!(
                "invalid mtu {}: {e} (number or string)",
                describe(v)
            ))
        })
}

fn veth_prefix(obj: &Object) -> Result<String, CniError> {
    let Some(prefix) = opt_str(obj, "vethPrefix", "").map_err(CniError::invalid_config)? else {
        return Ok(DEFAULT_VETH_PREFIX.to_owned());
    };
    check_veth_prefix(prefix)
        .map_err(|e| CniError::invalid_config(format!("invalid vethPrefix {prefix:?}: {e}")))?;
    Ok(prefix.to_owned())
}

fn valid_attachments(obj: &Object) -> Result<Option<Vec<Attachment>>, String> {
    let keys = [VALID_ATTACHMENTS_KEY, LEGACY_ATTACHMENTS_KEY];
    if keys.iter().all(|k| field(obj, k).is_none()) {
        return Ok(None);
    }
    let mut out: Vec<Attachment> = Vec::new();
    let mut seen: HashSet<Attachment> = HashSet::new();
    for key in keys {
        for (i, item) in opt_array(obj, key, "")?.iter().enumerate() {
            let path = format!("{key}[{i}]");
            let entry = as_object(item, &path)?;
            let path = format!("{path}.");
            let attachment = Attachment {
                container_id: opt_str(entry, "containerID", &path)?
                    .ok_or_else(|| format!("{path}containerID is missing"))?
                    .to_owned(),
                ifname: opt_str(entry, "ifname", &path)?
                    .ok_or_else(|| format!("{path}ifname is missing"))?
                    .to_owned(),
            };
            if seen.insert(attachment.clone()) {
                out.push(attachment);
            }
        }
    }
    Ok(Some(out))
}
