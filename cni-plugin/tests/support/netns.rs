//! A "node" and a "pod" network namespace with unique names for the root tests, deleted on
//! drop (also when the test panics). The machine's own namespace is never touched.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

pub struct Namespaces {
    pub node: String,
    pub pod: String,
}

impl Namespaces {
    /// Creates both; the node gets `lo` up with 10.99.0.1/32 as its own address (what a node's
    /// eth0 address is to a pod: a source for pings and the destination of replies).
    pub fn new() -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let base = format!("vc-{}-{n}", std::process::id());
        let ns = Namespaces {
            node: format!("{base}-node"),
            pod: format!("{base}-pod"),
        };
        for name in [&ns.node, &ns.pod] {
            run(&["ip", "netns", "add", name]);
        }
        ns.ip_node(&["link", "set", "lo", "up"]);
        ns.ip_node(&["addr", "add", "10.99.0.1/32", "dev", "lo"]);
        ns
    }

    pub fn pod_path(&self) -> String {
        format!("/run/netns/{}", self.pod)
    }

    /// `ip -n <node> args...`, output lines with whitespace normalised.
    pub fn ip_node(&self, args: &[&str]) -> Vec<String> {
        ip_in(&self.node, args)
    }

    /// `ip -n <pod> args...`.
    pub fn ip_pod(&self, args: &[&str]) -> Vec<String> {
        ip_in(&self.pod, args)
    }

    /// One ping from the node to `ip`, bounded to 3 seconds.
    pub fn ping_from_node(&self, ip: &str) -> bool {
        Command::new("ip")
            .args([
                "netns", "exec", &self.node, "ping", "-c", "1", "-W", "3", ip,
            ])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    /// Asserts the node holds nothing of a pod with address `ip` and host veth `veth`.
    pub fn assert_node_clean(&self, ip: &str, veth: &str) {
        let links = self.ip_node(&["-o", "link", "show"]);
        assert!(
            !links.iter().any(|l| l.contains(veth)),
            "host veth left: {links:?}"
        );
        let routes = self.ip_node(&["-4", "route", "show", "table", "all"]);
        let prefix = format!("{ip} ");
        assert!(
            !routes.iter().any(|l| l.starts_with(&prefix)),
            "host route left: {routes:?}"
        );
        let rules = self.ip_node(&["-4", "rule", "show"]);
        assert!(
            !rules.iter().any(|l| l.contains(&prefix) || l.ends_with(ip)),
            "host rule left: {rules:?}"
        );
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in [&self.node, &self.pod] {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

pub fn ip_in(ns: &str, args: &[&str]) -> Vec<String> {
    let mut full = vec!["ip", "-n", ns];
    full.extend_from_slice(args);
    run(&full)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

/// Runs a command, panicking with its stderr when it fails.
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
