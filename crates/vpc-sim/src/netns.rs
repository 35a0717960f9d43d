//! Doing things inside a named network namespace without moving any tokio thread.
//!
//! `setns` changes the namespace of the calling thread only, so the work runs on a dedicated
//! short-lived std thread that enters the namespace, does it, and goes back. Sockets keep the
//! namespace they were created in, so listeners bound there can be served from anywhere.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;

use nix::sched::{CloneFlags, setns};
use thiserror::Error;

/// A namespace operation that failed.
#[derive(Debug, Error)]
pub enum NetnsError {
    /// `/run/netns/NAME` cannot be opened.
    #[error("cannot open network namespace {name}: {source}")]
    Open {
        /// Namespace name.
        name: String,
        /// Cause.
        source: io::Error,
    },
    /// setns failed.
    #[error("cannot enter network namespace {name}: {source}")]
    Enter {
        /// Namespace name.
        name: String,
        /// Cause.
        source: nix::Error,
    },
    /// Binding a listener failed.
    #[error("cannot listen on {addr} in network namespace {name}: {source}")]
    Bind {
        /// Namespace name.
        name: String,
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: io::Error,
    },
    /// The helper thread died.
    #[error("the helper thread for network namespace {0} panicked")]
    Thread(String),
}

/// Path of a named namespace (as `ip netns add` creates it).
pub fn netns_path(name: &str) -> PathBuf {
    PathBuf::from("/run/netns").join(name)
}

/// Runs `f` on a fresh std thread inside namespace `name` and returns its result. The thread
/// goes back to its original namespace afterwards (and ends in any case).
pub fn run_in<T, F>(name: &str, f: F) -> Result<T, NetnsError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let owned = name.to_string();
    let handle = std::thread::Builder::new()
        .name(format!("netns-{name}"))
        .spawn(move || -> Result<T, NetnsError> {
            let open = |path: PathBuf| {
                File::open(path).map_err(|source| NetnsError::Open {
                    name: owned.clone(),
                    source,
                })
            };
            let original = open(PathBuf::from("/proc/thread-self/ns/net"))?;
            let target = open(netns_path(&owned))?;
            setns(&target, CloneFlags::CLONE_NEWNET).map_err(|source| NetnsError::Enter {
                name: owned.clone(),
                source,
            })?;
            let out = f();
            // Best effort: the thread ends right after, so a failed return strands nothing.
            if let Err(e) = setns(&original, CloneFlags::CLONE_NEWNET) {
                tracing::warn!(netns = %owned, error = %e, "could not return to the original namespace");
            }
            Ok(out)
        })
        .map_err(|_| NetnsError::Thread(name.to_string()))?;
    handle
        .join()
        .map_err(|_| NetnsError::Thread(name.to_string()))?
}

/// Binds non-blocking TCP listeners on `addrs` inside namespace `name`.
pub fn bind_in(name: &str, addrs: &[SocketAddr]) -> Result<Vec<TcpListener>, NetnsError> {
    let addrs = addrs.to_vec();
    let ns = name.to_string();
    run_in(name, move || {
        addrs
            .iter()
            .map(|addr| {
                let l = TcpListener::bind(addr).and_then(|l| {
                    l.set_nonblocking(true)?;
                    Ok(l)
                });
                l.map_err(|source| NetnsError::Bind {
                    name: ns.clone(),
                    addr: *addr,
                    source,
                })
            })
            .collect()
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_namespace_is_a_clear_error() {
        let e = bind_in(
            "vpc-sim-no-such-ns-for-test",
            &["127.0.0.1:0".parse().unwrap()],
        )
        .unwrap_err();
        assert!(matches!(e, NetnsError::Open { .. }), "{e}");
        assert!(e.to_string().contains("vpc-sim-no-such-ns-for-test"));
    }
}
