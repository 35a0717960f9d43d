//! Helpers for the root tests: `ip`, our namespaces, requests from inside a namespace.

use std::process::Output;

/// Runs `ip ARGS`, which must succeed; returns stdout.
pub fn ip(args: &[&str]) -> String {
    let mut argv = vec!["ip"];
    argv.extend_from_slice(args);
    testkit::cmd::run(&argv)
}

/// Runs `ip netns exec NS ARGS...` (any outcome).
pub fn exec_in(ns: &str, args: &[&str]) -> Output {
    let mut full = vec!["netns", "exec", ns];
    full.extend_from_slice(args);
    testkit::cmd::run_bounded(testkit::cmd::QUICK_SECS, "ip", &full, None)
}

/// Namespaces whose name starts with `PREFIX-`.
pub fn our_namespaces(prefix: &str) -> Vec<String> {
    testkit::netns::names_with_prefix(&format!("{prefix}-"))
}

/// Deletes any namespace left with our prefix (only ever ours: the prefix is unique).
pub struct NsGuard(pub String);

impl Drop for NsGuard {
    fn drop(&mut self) {
        for ns in our_namespaces(&self.0) {
            let _ = testkit::cmd::run_bounded(
                testkit::cmd::QUICK_SECS,
                "ip",
                &["netns", "del", &ns],
                None,
            );
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
    let stream = testkit::netns::connect_in(ns, addr);
    testkit::http::exchange(stream, method, addr, path, headers, body)
}
