//! Test support shared by the workspace's tests: bounded waits on a condition, bounded
//! commands, throw-away network namespaces, a raw HTTP/1.1 client, asserts on what a CNI
//! plugin printed and did, and the replay of the committed fuzz corpora.
//!
//! Only ever a dev-dependency (or a dependency of the end-to-end test crate): no shipped
//! binary links it, which is why it may panic wherever a test would.

pub mod cmd;
pub mod cni;
pub mod fuzz;
pub mod http;
pub mod netns;
pub mod promtool;
pub mod steps;
pub mod wait;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

pub use steps::Steps;
pub use wait::{wait_for, wait_ok, wait_until, within};

/// `<prefix><pid>-<n>`: unique among the processes running now, and within this one.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// The repository root: the nearest directory above the running test's package (or this
/// crate) whose Cargo.toml declares the workspace.
pub fn repo() -> PathBuf {
    // Read at run time: clones share one target dir outside the tree, and cargo may reuse a
    // test binary built in another clone whose compile-time path no longer exists.
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    start
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|toml| toml.lines().any(|l| l.trim() == "[workspace]"))
        })
        .unwrap_or_else(|| panic!("no workspace root above {}", start.display()))
        .to_path_buf()
}
