//! A "node" and a "pod" network namespace for the root tests (testkit's: unique names,
//! deleted on drop, the machine's own namespace never touched).

use testkit::netns::Netns;

pub struct Namespaces {
    pub node: Netns,
    pub pod: Netns,
}

impl Namespaces {
    /// Creates both; the node gets `lo` up with 10.99.0.1/32 as its own address (what a node's
    /// eth0 address is to a pod: a source for pings and the destination of replies).
    pub fn new() -> Self {
        let base = testkit::unique("vc-");
        let ns = Namespaces {
            node: Netns::named(format!("{base}-node")),
            pod: Netns::named(format!("{base}-pod")),
        };
        ns.ip_node(&["link", "set", "lo", "up"]);
        ns.ip_node(&["addr", "add", "10.99.0.1/32", "dev", "lo"]);
        ns
    }

    pub fn pod_path(&self) -> String {
        self.pod.path().display().to_string()
    }

    /// `ip -n <node> args...`, output lines with whitespace normalised.
    pub fn ip_node(&self, args: &[&str]) -> Vec<String> {
        self.node.ip(args)
    }

    /// `ip -n <pod> args...`.
    pub fn ip_pod(&self, args: &[&str]) -> Vec<String> {
        self.pod.ip(args)
    }

    /// One ping from the node to `ip`, bounded.
    pub fn ping_from_node(&self, ip: &str) -> bool {
        testkit::netns::ping(&self.node, ip)
    }

    /// Asserts the node holds nothing of a pod with address `ip` and host veth `veth`.
    pub fn assert_node_clean(&self, ip: &str, veth: &str) {
        testkit::cni::assert_host_clean(&self.node, ip, veth);
    }

    /// Asserts what a DEL leaves of the pod with address `ip`: no route or rule, and its veth
    /// pair, which the namespace's removal (or ipamd's sweep, absent here) takes.
    pub fn assert_node_unrouted(&self, ip: &str, veth: &str) {
        testkit::cni::assert_host_unrouted(&self.node, ip);
        let links = self.ip_node(&["-o", "link", "show"]);
        assert!(
            links.iter().any(|l| l.contains(veth)),
            "DEL deleted the veth {veth}: {links:?}"
        );
    }
}
