//! Throw-away network namespaces for root tests, and `ip` output helpers.
#![allow(dead_code)] // shared by several test binaries, each using part of it

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use netops::Netlink;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A "host" and a "pod" namespace with unique names, deleted on drop (also when a test
/// panics). Nothing is ever done in the machine's own namespace.
pub struct NsPair {
    pub host: String,
    pub pod: String,
}

impl NsPair {
    pub fn new() -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let base = format!("nt-{}-{n}", std::process::id());
        let pair = NsPair {
            host: format!("{base}-host"),
            pod: format!("{base}-pod"),
        };
        for name in [&pair.host, &pair.pod] {
            run(&["ip", "netns", "add", name]);
        }
        pair
    }

    pub fn host_path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.host))
    }

    pub fn pod_path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.pod))
    }

    pub fn host_nl(&self) -> Netlink {
        Netlink::in_netns(&self.host_path()).expect("host netlink")
    }

    pub fn pod_nl(&self) -> Netlink {
        Netlink::in_netns(&self.pod_path()).expect("pod netlink")
    }

    /// `ip -n <host> args...`, output lines trimmed.
    pub fn ip_host(&self, args: &[&str]) -> Vec<String> {
        ip_in(&self.host, args)
    }

    /// `ip -n <pod> args...`, output lines trimmed.
    pub fn ip_pod(&self, args: &[&str]) -> Vec<String> {
        ip_in(&self.pod, args)
    }
}

impl Drop for NsPair {
    fn drop(&mut self) {
        for name in [&self.host, &self.pod] {
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

/// How many lines equal `line` exactly (after whitespace normalisation).
pub fn count(lines: &[String], line: &str) -> usize {
    lines.iter().filter(|l| l.as_str() == line).count()
}
