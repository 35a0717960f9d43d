//! Per-interface IPv6 settings (`net.ipv6.conf.<if>.<setting>`) in a given network namespace.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;

use nix::sched::{CloneFlags, setns};

use crate::error::{NetlinkError, Result, libc_errno};
use crate::netns::is_current_netns;

/// The operation text of a setting, as `sysctl` names it.
pub(crate) fn ipv6_conf_op(ifname: &str, setting: &str, value: &str) -> String {
    format!("set net.ipv6.conf.{ifname}.{setting}={value}")
}

/// Writes `value` to `/proc/sys/net/ipv6/conf/<ifname>/<setting>` as seen from `netns`.
///
/// /proc/sys/net shows the namespace of the thread that opens it, so the write happens on a
/// short-lived thread that enters `netns` first (unless it is the caller's own): the caller's
/// threads never move, and a write can never land in another namespace's settings. A missing
/// file (no such interface, or a kernel without IPv6) is an error whose
/// [`NetlinkError::is_not_found`] is true.
pub(crate) fn set_ipv6_conf(
    netns: BorrowedFd<'_>,
    ifname: &str,
    setting: &str,
    value: &str,
) -> Result<()> {
    let op = ipv6_conf_op(ifname, setting, value);
    let path = format!("/proc/sys/net/ipv6/conf/{ifname}/{setting}");
    let enter = !is_current_netns(netns);
    std::thread::scope(|s| {
        s.spawn(|| {
            if enter {
                setns(netns, CloneFlags::CLONE_NEWNET).map_err(|errno| NetlinkError::Netns {
                    path: PathBuf::from(format!("/proc/self/fd/{}", netns.as_raw_fd())),
                    action: "enter",
                    source: errno.into(),
                })?;
            }
            write(&path, value).map_err(|e| io_error(&op, &e))
        })
        .join()
        .unwrap_or_else(|_| Err(io_error(&op, &io::Error::other("sysctl thread panicked"))))
    })
}

fn write(path: &str, value: &str) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

/// The errno as the kernel's verdict, so callers test it like any other (`is_not_found`).
fn io_error(op: &str, e: &io::Error) -> NetlinkError {
    NetlinkError::Kernel {
        op: op.to_string(),
        errno: e.raw_os_error().unwrap_or(libc_errno::EIO),
        ext_ack: None,
    }
}
