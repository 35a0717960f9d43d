//! The ADD result, modelled once (the 1.x shape) and rendered in any supported version.

mod decode;
mod encode;

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde_json::Value;

use crate::error::CniError;
use crate::version::CniVersion;

/// A success result. `to_json` drops what a version does not have (`ips[].version` is added
/// for 0.x, `interfaces[].mtu` only exists in 1.1.0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniResult {
    /// Interfaces created or configured; container-side ones carry `sandbox`.
    pub interfaces: Vec<Interface>,
    /// Assigned addresses.
    pub ips: Vec<IpConfig>,
    /// Routes in the container.
    pub routes: Vec<Route>,
    /// DNS settings; omitted from JSON when empty.
    pub dns: Dns,
}

/// `interfaces[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    /// Interface name (always emitted).
    pub name: String,
    /// Hardware address. The AWS plugin also uses it as a side channel in `prevResult`.
    pub mac: Option<String>,
    /// MTU; emitted only for 1.1.0.
    pub mtu: Option<u32>,
    /// Netns path for container-side interfaces; `None` on the host.
    pub sandbox: Option<String>,
}

/// `ips[]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    /// Address with prefix, host bits kept (e.g. `10.0.1.5/32`).
    pub address: IpNetwork,
    /// Gateway, if any.
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`; runtimes attach the IP to that interface's name.
    pub interface: Option<usize>,
}

/// `routes[]` entry (the 1.1.0 extras `mtu`, `advmss`, `priority`, `table`, `scope` are not
/// modelled and are dropped when a `prevResult` is re-read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination network.
    pub dst: IpNetwork,
    /// Next hop; `None` means "use the matching `ips[].gateway`" per spec.
    pub gw: Option<IpAddr>,
}

/// `dns` object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dns {
    /// Name servers in priority order.
    pub nameservers: Vec<String>,
    /// Local domain.
    pub domain: Option<String>,
    /// Search domains.
    pub search: Vec<String>,
    /// resolver options.
    pub options: Vec<String>,
}

impl Dns {
    /// Nothing set: the `dns` key is left out of the JSON.
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_none()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

impl CniResult {
    /// The result in the exact shape of `version`, `cniVersion` included.
    pub fn to_json(&self, version: CniVersion) -> Value {
        encode::encode(self, version)
    }

    /// [`Self::to_json`] as text, ready for stdout.
    pub fn to_json_string(&self, version: CniVersion) -> String {
        self.to_json(version).to_string()
    }

    /// Reads a result (typically `prevResult`) of any supported version.
    ///
    /// Tolerant like libcni: unknown keys are ignored, `null` counts as absent, a missing
    /// `cniVersion` is fine, and both the 0.x and 1.x shapes are accepted whatever `version`
    /// says (libcni converts cached results to the config's version before sending them, so a
    /// mismatch would be harmless). Anything that is not a well-formed result is code 6 with
    /// the offending field's path, e.g. `ips[0].address "x" is not a CIDR ...`.
    pub fn from_json(value: &Value, version: CniVersion) -> Result<CniResult, CniError> {
        decode::decode(value)
            .map_err(|msg| CniError::decoding_failure(format!("invalid {version} result: {msg}")))
    }

    /// Index of the container-side interface: named `ifname` and with a sandbox set.
    ///
    /// Runtimes (containerd's go-cni) attach `ips[]` to `interfaces[ips.interface].name` and
    /// need it to be `CNI_IFNAME`, so every `ips[].interface` should be this index.
    pub fn container_interface_index(&self, ifname: &str) -> Option<usize> {
        self.interfaces
            .iter()
            .position(|i| i.name == ifname && i.sandbox.as_deref().is_some_and(|s| !s.is_empty()))
    }
}
