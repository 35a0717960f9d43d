//! The `CNI_*` environment contract, with skel's required-variable rules.

use std::fmt;

use crate::error::CniError;
use crate::validate::{validate_container_id, validate_ifname};
use crate::version::SUPPORTED_VERSIONS;

/// A CNI verb (`CNI_COMMAND`). Matching is case-sensitive, as in skel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// Attach a container.
    Add,
    /// Detach a container (best effort, idempotent).
    Del,
    /// Verify an attachment (spec ≥ 0.4.0).
    Check,
    /// Report readiness to service ADD (spec ≥ 1.1.0).
    Status,
    /// Garbage-collect resources of attachments not listed as valid (spec ≥ 1.1.0).
    Gc,
    /// Report supported spec versions.
    Version,
}

impl Command {
    /// Parses the exact upper-case verb; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "VERSION" => Command::Version,
            _ => return None,
        })
    }

    /// The verb as the runtime spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
            Command::Gc => "GC",
            Command::Version => "VERSION",
        }
    }

    /// ADD, DEL and CHECK act on one `(container, ifname)` attachment.
    pub fn is_attachment_op(self) -> bool {
        matches!(self, Command::Add | Command::Del | Command::Check)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One plugin invocation as described by the `CNI_*` environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// `CNI_COMMAND`.
    pub command: Command,
    /// `CNI_CONTAINERID`: non-empty and validated for ADD/CHECK/DEL; for other verbs whatever
    /// the runtime set (usually empty), unvalidated.
    pub container_id: String,
    /// `CNI_NETNS`: always `Some` for ADD/CHECK; `None` when unset or empty (normal on DEL).
    pub netns: Option<String>,
    /// `CNI_IFNAME`: non-empty and validated for ADD/CHECK/DEL; otherwise as set (often empty).
    pub ifname: String,
    /// `CNI_ARGS` verbatim (empty when unset); see [`crate::parse_cni_args`].
    pub args: String,
    /// `CNI_PATH` verbatim, `None` when unset or empty. Optional for every verb: we never
    /// delegate to other plugins, so unlike skel we do not require it.
    pub path: Option<String>,
    /// `CNI_NETNS_OVERRIDE` is `1` or `true` (any case): skip the "plugin runs in CNI_NETNS"
    /// check, as skel does for tests.
    pub netns_override: bool,
}

/// Reads a variable, treating empty as unset (skel's `Getenv(..) == ""`).
fn non_empty(get: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    get(name).filter(|v| !v.is_empty())
}

impl Invocation {
    /// Reads and validates the `CNI_*` variables through `get` (e.g. `|k| std::env::var(k).ok()`;
    /// map non-UTF-8 values lossily rather than to `None`, or they are reported as missing).
    ///
    /// Errors (all code 4): unset/empty `CNI_COMMAND` (check [`about_requested`] first to
    /// print the about text instead, as skel does), an unknown verb, missing required variables
    /// (all of them named in one message), a container id or interface name breaking the rules.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Invocation, CniError> {
        let Some(raw_command) = non_empty(&get, "CNI_COMMAND") else {
            return Err(missing(&["CNI_COMMAND"]));
        };
        let command = Command::parse(&raw_command).ok_or_else(|| {
            CniError::invalid_env(format!(
                "unknown CNI_COMMAND: {raw_command:?} (expected ADD, DEL, CHECK, STATUS, GC or VERSION)"
            ))
        })?;

        let container_id = non_empty(&get, "CNI_CONTAINERID");
        let netns = non_empty(&get, "CNI_NETNS");
        let ifname = non_empty(&get, "CNI_IFNAME");

        if command.is_attachment_op() {
            let mut absent = Vec::new();
            if container_id.is_none() {
                absent.push("CNI_CONTAINERID");
            }
            if netns.is_none() && command != Command::Del {
                absent.push("CNI_NETNS");
            }
            if ifname.is_none() {
                absent.push("CNI_IFNAME");
            }
            if !absent.is_empty() {
                return Err(missing(&absent));
            }
        }

        let container_id = container_id.unwrap_or_default();
        let ifname = ifname.unwrap_or_default();
        if command.is_attachment_op() {
            validate_container_id(&container_id)?;
            validate_ifname(&ifname)?;
        }

        let netns_override =
            get("CNI_NETNS_OVERRIDE").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));

        Ok(Invocation {
            command,
            container_id,
            netns,
            ifname,
            args: get("CNI_ARGS").unwrap_or_default(),
            path: non_empty(&get, "CNI_PATH"),
            netns_override,
        })
    }

    /// The non-empty directories of `CNI_PATH` (`:`-separated).
    pub fn path_dirs(&self) -> impl Iterator<Item = &str> {
        self.path
            .as_deref()
            .unwrap_or("")
            .split(':')
            .filter(|d| !d.is_empty())
    }
}

/// skel's wording, variable names comma-joined: `required env variables [A,B] missing`.
fn missing(names: &[&str]) -> CniError {
    CniError::invalid_env(format!(
        "required env variables [{}] missing",
        names.join(",")
    ))
}

/// True when `CNI_COMMAND` is unset or empty: skel then prints [`about_message`] on stderr and
/// exits 0 instead of failing.
pub fn about_requested(get: impl Fn(&str) -> Option<String>) -> bool {
    non_empty(&get, "CNI_COMMAND").is_none()
}

/// What skel prints on stderr when run without `CNI_COMMAND`: the plugin's about line, then
/// `CNI protocol versions supported: 0.3.0, ...`, each line newline-terminated.
pub fn about_message(about: &str) -> String {
    format!(
        "{about}\nCNI protocol versions supported: {}\n",
        SUPPORTED_VERSIONS.join(", ")
    )
}
