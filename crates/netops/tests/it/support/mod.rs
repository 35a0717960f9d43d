//! Throw-away network namespaces for root tests (testkit's), with netlink handles into them.

use std::path::PathBuf;

use netops::Netlink;
pub use testkit::cmd::run;
use testkit::netns::Netns;

/// A "host" and a "pod" namespace, deleted on drop.
pub struct NsPair {
    pub host: Netns,
    pub pod: Netns,
}

impl NsPair {
    pub fn new() -> Self {
        let base = testkit::unique("nt-");
        NsPair {
            host: Netns::named(format!("{base}-host")),
            pod: Netns::named(format!("{base}-pod")),
        }
    }

    pub fn host_path(&self) -> PathBuf {
        self.host.path()
    }

    pub fn pod_path(&self) -> PathBuf {
        self.pod.path()
    }

    pub fn host_nl(&self) -> Netlink {
        Netlink::in_netns(&self.host_path()).expect("host netlink")
    }

    pub fn pod_nl(&self) -> Netlink {
        Netlink::in_netns(&self.pod_path()).expect("pod netlink")
    }

    /// `ip -n <host> args...`, output lines normalised.
    pub fn ip_host(&self, args: &[&str]) -> Vec<String> {
        self.host.ip(args)
    }

    /// `ip -n <pod> args...`, output lines normalised.
    pub fn ip_pod(&self, args: &[&str]) -> Vec<String> {
        self.pod.ip(args)
    }
}
