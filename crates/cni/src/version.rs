//! CNI spec versions this plugin speaks, and the VERSION verb.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::error::CniError;

/// Every spec version we accept in a config and can emit a result for, oldest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// A supported CNI spec version. Ordering follows the spec's release order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CniVersion {
    /// 0.3.0
    V0_3_0,
    /// 0.3.1
    V0_3_1,
    /// 0.4.0: adds CHECK.
    V0_4_0,
    /// 1.0.0: drops `ips[].version`.
    V1_0_0,
    /// 1.1.0: adds STATUS, GC and `interfaces[].mtu`.
    V1_1_0,
}

impl CniVersion {
    /// All supported versions, oldest first (same order as [`SUPPORTED_VERSIONS`]).
    pub const ALL: [CniVersion; 5] = [
        CniVersion::V0_3_0,
        CniVersion::V0_3_1,
        CniVersion::V0_4_0,
        CniVersion::V1_0_0,
        CniVersion::V1_1_0,
    ];

    /// The newest version we implement; what VERSION reports as `cniVersion`.
    pub const LATEST: CniVersion = CniVersion::V1_1_0;

    /// Exact match against the supported list (libcni compares version strings exactly too).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The version as it appears in JSON, e.g. `"0.4.0"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CniVersion::V0_3_0 => "0.3.0",
            CniVersion::V0_3_1 => "0.3.1",
            CniVersion::V0_4_0 => "0.4.0",
            CniVersion::V1_0_0 => "1.0.0",
            CniVersion::V1_1_0 => "1.1.0",
        }
    }

    /// CHECK exists from 0.4.0 on.
    pub fn supports_check(self) -> bool {
        self >= CniVersion::V0_4_0
    }

    /// STATUS and GC exist from 1.1.0 on.
    pub fn supports_status_gc(self) -> bool {
        self >= CniVersion::V1_1_0
    }

    /// Results before 1.0.0 carry `ips[].version` ("4"/"6").
    pub fn has_ip_version_field(self) -> bool {
        self < CniVersion::V1_0_0
    }

    /// `interfaces[].mtu` exists from 1.1.0 on.
    pub fn has_interface_mtu(self) -> bool {
        self >= CniVersion::V1_1_0
    }
}

impl fmt::Display for CniVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CniVersion {
    type Err = CniError;

    /// Fails with code 1 naming the version and the supported list.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s).ok_or_else(|| incompatible(s))
    }
}

/// Code 1 for a config version we do not speak; the wording follows libcni's reconciler.
pub(crate) fn incompatible(config_version: &str) -> CniError {
    CniError::incompatible_version(format!(
        "incompatible CNI versions: config is {config_version:?}, plugin supports {SUPPORTED_VERSIONS:?}"
    ))
}

/// The VERSION verb's reply: `{"cniVersion":"1.1.0","supportedVersions":[...]}`.
///
/// Like Go's skel, the reply does not depend on stdin at all.
pub fn version_reply() -> String {
    let mut obj = serde_json::Map::new();
    obj.insert(
        "cniVersion".into(),
        Value::from(CniVersion::LATEST.as_str()),
    );
    obj.insert(
        "supportedVersions".into(),
        Value::from(SUPPORTED_VERSIONS.to_vec()),
    );
    Value::Object(obj).to_string()
}

/// The runtime's version from VERSION's stdin (`{"cniVersion":"..."}`), for logging only.
///
/// Never fails: skel replaces VERSION's stdin with nothing before dispatching, so VERSION must
/// answer even when stdin is empty, not JSON, or names a version we do not support. Returns
/// `None` whenever no string `cniVersion` can be read.
pub fn parse_version_request(stdin: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(stdin).ok()?;
    value.get("cniVersion")?.as_str().map(str::to_owned)
}
