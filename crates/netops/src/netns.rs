//! Entering a network namespace for the duration of one closure, on the calling thread only.

use std::fs::File;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::sched::{CloneFlags, setns};

use crate::error::{NetlinkError, Result};

/// The calling thread's own network namespace. `/proc/self` would name the main thread's,
/// which differs while another thread is inside a pod namespace.
pub(crate) const THREAD_NETNS: &str = "/proc/thread-self/ns/net";

/// Opens a network namespace file. A missing path is [`NetlinkError::NetnsNotFound`].
pub(crate) fn open(path: &Path) -> Result<OwnedFd> {
    match File::open(path) {
        Ok(f) => Ok(f.into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(NetlinkError::NetnsNotFound {
            path: path.to_path_buf(),
        }),
        Err(source) => Err(NetlinkError::Netns {
            path: path.to_path_buf(),
            action: "open",
            source,
        }),
    }
}

/// Runs `f` with the calling thread inside the namespace `target` (opened from `path`), then
/// always returns the thread to the namespace it was in, whether `f` succeeded or not.
///
/// Only the calling thread moves: other threads of the process are unaffected. If the return
/// itself fails, the thread is left in `target` and an error says so; the caller should then
/// not use this thread for anything namespace-sensitive again.
pub(crate) fn with_netns<T>(
    path: &Path,
    target: &OwnedFd,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let original = open(Path::new(THREAD_NETNS)).map_err(|e| match e {
        NetlinkError::NetnsNotFound { path } => NetlinkError::Netns {
            path,
            action: "open",
            source: io::Error::from(io::ErrorKind::NotFound),
        },
        other => other,
    })?;
    setns(target, CloneFlags::CLONE_NEWNET).map_err(|errno| match errno {
        // setns on a file that is not an nsfs inode, e.g. the empty bind-mount point left
        // behind when a namespace was deleted without unmounting.
        Errno::EINVAL => NetlinkError::NotANetns {
            path: path.to_path_buf(),
        },
        other => NetlinkError::Netns {
            path: path.to_path_buf(),
            action: "enter",
            source: other.into(),
        },
    })?;
    let result = f();
    if let Err(errno) = setns(&original, CloneFlags::CLONE_NEWNET) {
        return Err(NetlinkError::Netns {
            path: path.to_path_buf(),
            action: "return to the original namespace",
            source: errno.into(),
        });
    }
    result
}

/// True when `netns` is the calling thread's own network namespace (no need to enter it).
pub(crate) fn is_current_netns(netns: BorrowedFd<'_>) -> bool {
    match (
        nix::sys::stat::fstat(netns),
        nix::sys::stat::stat(THREAD_NETNS),
    ) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}
