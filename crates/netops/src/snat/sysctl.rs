//! Loose reverse-path filtering on the primary ENI.

use std::fs;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;

use nix::sched::{CloneFlags, setns};

use super::error::{Result, SnatError};

/// `rp_filter` value for loose mode: a source is valid if any route leads back to it.
pub const RP_FILTER_LOOSE: &str = "2";

/// Sets `net.ipv4.conf.<ifname>.rp_filter` to loose in the network namespace `netns` and
/// returns the previous value if it had to change it.
///
/// /proc/sys/net shows the namespace of the thread that opens it, so the write happens on a
/// short-lived thread that enters `netns` first: the caller's threads never move. When `netns`
/// is the caller's own namespace (ipamd on a node) the thread does not enter it: setns needs
/// CAP_SYS_ADMIN, which the DaemonSet does not grant. A value already loose (set by the
/// privileged `ipamd init` container) is only read, since /proc/sys is read-only there.
pub(crate) fn set_rp_filter_loose(netns: BorrowedFd<'_>, ifname: &str) -> Result<Option<String>> {
    let path = format!("/proc/sys/net/ipv4/conf/{ifname}/rp_filter");
    let enter = !is_current_netns(netns);
    std::thread::scope(|s| {
        s.spawn(|| {
            if enter {
                setns(netns, CloneFlags::CLONE_NEWNET).map_err(|errno| {
                    SnatError::Netops(crate::Error::Netns {
                        path: PathBuf::from(format!("/proc/self/fd/{}", netns.as_raw_fd())),
                        action: "enter",
                        source: errno.into(),
                    })
                })?;
            }
            let sysctl_err = |source| SnatError::Sysctl {
                path: path.clone(),
                source,
            };
            let old = fs::read_to_string(&path).map_err(sysctl_err)?;
            let old = old.trim();
            if old == RP_FILTER_LOOSE {
                return Ok(None);
            }
            fs::write(&path, RP_FILTER_LOOSE).map_err(sysctl_err)?;
            Ok(Some(old.to_string()))
        })
        .join()
        .unwrap_or_else(|_| {
            Err(SnatError::Sysctl {
                path: path.clone(),
                source: std::io::Error::other("sysctl thread panicked"),
            })
        })
    })
}

/// True when `netns` is the namespace this thread is in (same inode on nsfs).
fn is_current_netns(netns: BorrowedFd<'_>) -> bool {
    match (
        nix::sys::stat::fstat(netns),
        nix::sys::stat::stat("/proc/thread-self/ns/net"),
    ) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn the_own_namespace_is_recognised_and_another_is_not() {
        let own = File::open("/proc/thread-self/ns/net").unwrap();
        assert!(is_current_netns(own.as_fd()));
        // Any other nsfs file has another inode: the user namespace stands in for a foreign
        // network namespace, which an unprivileged test cannot create.
        let other = File::open("/proc/thread-self/ns/user").unwrap();
        assert!(!is_current_netns(other.as_fd()));
    }
}
