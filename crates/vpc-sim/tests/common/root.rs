//! Helpers for the root tests: `ip`, our namespaces, requests from inside a namespace.

use std::net::TcpStream;
use std::process::{Command, Output};

use vpc_sim::netns;

use super::http;

/// Runs `ip ARGS`, which must succeed; returns stdout.
pub fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `ip netns exec NS ARGS...` (any outcome).
pub fn exec_in(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .unwrap()
}

/// Namespaces whose name starts with `PREFIX-`.
pub fn our_namespaces(prefix: &str) -> Vec<String> {
    ip(&["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .map(str::to_string)
        .collect()
}

/// Deletes any namespace left with our prefix (only ever ours: the prefix is unique).
pub struct NsGuard(pub String);

impl Drop for NsGuard {
    fn drop(&mut self) {
        for ns in our_namespaces(&self.0) {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
    }
}

/// One request from inside namespace `ns` to `addr`.
pub fn http_in(
    ns: &str,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let target = addr.to_string();
    let stream = netns::run_in(ns, move || TcpStream::connect(&target))
        .unwrap()
        .unwrap();
    http(stream, method, addr, path, headers, body)
}
