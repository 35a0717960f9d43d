//! Throw-away network namespaces for root tests, and `ip` with its output normalised.
//!
//! Every namespace made here has a name unique to this process and is deleted on drop, also
//! when the test panics; nothing is ever done in the machine's own namespace.

use std::fs::File;
use std::net::TcpStream;
use std::path::PathBuf;

use crate::cmd::{QUICK_SECS, run, run_bounded};

/// A network namespace made for one test, deleted on drop.
pub struct Netns {
    name: String,
}

impl Netns {
    /// A new namespace named `<prefix><pid>-<n>`.
    pub fn new(prefix: &str) -> Netns {
        Netns::named(crate::unique(prefix))
    }

    /// A new namespace called `name`, which must be unique to this process (see
    /// [`crate::unique`]).
    pub fn named(name: String) -> Netns {
        run(&["ip", "netns", "add", &name]);
        Netns { name }
    }

    /// Its name, as `ip netns` lists it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/<name>`.
    pub fn path(&self) -> PathBuf {
        path(&self.name)
    }

    /// `ip -n <name> args...`, see [`ip`].
    pub fn ip(&self, args: &[&str]) -> Vec<String> {
        ip_in(&self.name, args)
    }
}

/// A namespace stands for its name wherever a name is wanted (`ip -n`, `ip netns exec`).
impl std::ops::Deref for Netns {
    type Target = str;

    fn deref(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Display for Netns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run_bounded(QUICK_SECS, "ip", &["netns", "del", &self.name], None);
    }
}

/// `/run/netns/<name>`.
pub fn path(name: &str) -> PathBuf {
    PathBuf::from(format!("/run/netns/{name}"))
}

/// `ip args...`, which must succeed; its output lines with whitespace normalised, empty ones
/// dropped.
pub fn ip(args: &[&str]) -> Vec<String> {
    let mut argv = vec!["ip"];
    argv.extend_from_slice(args);
    run(&argv)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

/// `ip -n <ns> args...`, see [`ip`].
pub fn ip_in(ns: &str, args: &[&str]) -> Vec<String> {
    let mut full = vec!["-n", ns];
    full.extend_from_slice(args);
    ip(&full)
}

/// How many of `lines` equal `line`.
pub fn count(lines: &[String], line: &str) -> usize {
    lines.iter().filter(|l| l.as_str() == line).count()
}

/// The namespaces whose name starts with `prefix`.
pub fn names_with_prefix(prefix: &str) -> Vec<String> {
    ip(&["netns", "list"])
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// One ping from namespace `ns` to `ip`, waiting at most 2 s for the answer.
pub fn ping(ns: &str, ip: &str) -> bool {
    run_bounded(
        5,
        "ip",
        &["netns", "exec", ns, "ping", "-c", "1", "-W", "2", ip],
        None,
    )
    .status
    .success()
}

/// Runs `f` on a fresh thread that has entered namespace `ns`: a socket made there stays in
/// that namespace, wherever it is used afterwards.
pub fn run_in<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = path(ns);
    std::thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("entering {}: {e}", path.display()));
        f()
    })
    .join()
    .unwrap_or_else(|_| panic!("the thread in namespace {ns} panicked"))
}

/// A TCP connection to `addr` made from inside namespace `ns`.
pub fn connect_in(ns: &str, addr: &str) -> TcpStream {
    let target = addr.to_string();
    run_in(ns, move || TcpStream::connect(&target))
        .unwrap_or_else(|e| panic!("connecting to {addr} in namespace {ns}: {e}"))
}
