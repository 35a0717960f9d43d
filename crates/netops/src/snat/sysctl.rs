//! Sysctls the node needs: loose reverse-path filtering on the primary ENI, and any value
//! written only when it differs.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;

use nix::sched::{CloneFlags, setns};

use super::error::{Result, SnatError};
use crate::netns::is_current_netns;

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
                    SnatError::Netops(crate::NetlinkError::Netns {
                        path: PathBuf::from(format!("/proc/self/fd/{}", netns.as_raw_fd())),
                        action: "enter",
                        source: errno.into(),
                    })
                })?;
            }
            make_loose(&ProcSys, &path)
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

/// Reading and writing sysctl files: the seam unit tests replace.
trait SysctlFiles {
    /// The file's content.
    fn read(&self, path: &str) -> io::Result<String>;
    /// Writes `value` to the file.
    fn write(&self, path: &str, value: &str) -> io::Result<()>;
}

/// The files under /proc/sys, as the calling thread's namespaces show them.
struct ProcSys;

impl SysctlFiles for ProcSys {
    fn read(&self, path: &str) -> io::Result<String> {
        fs::read_to_string(path)
    }

    fn write(&self, path: &str, value: &str) -> io::Result<()> {
        fs::write(path, value)
    }
}

/// Sets the `rp_filter` file at `path` to loose unless it is already, and returns the value it
/// replaced.
fn make_loose(files: &impl SysctlFiles, path: &str) -> Result<Option<String>> {
    ensure(files, path, RP_FILTER_LOOSE)
}

/// Sets the sysctl file at `path` (under /proc/sys, as the calling thread's namespace shows it)
/// to `value` unless it holds it already, and returns the value it replaced. Writing only when
/// needed keeps a read-only /proc/sys (the DaemonSet's) working once the privileged init
/// container has done the write.
pub fn ensure_sysctl(path: &str, value: &str) -> Result<Option<String>> {
    ensure(&ProcSys, path, value)
}

fn ensure(files: &impl SysctlFiles, path: &str, value: &str) -> Result<Option<String>> {
    let sysctl_err = |source| SnatError::Sysctl {
        path: path.to_string(),
        source,
    };
    let old = files.read(path).map_err(sysctl_err)?;
    let old = old.trim();
    if old == value {
        return Ok(None);
    }
    files.write(path, value).map_err(sysctl_err)?;
    Ok(Some(old.to_string()))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::fs::File;
    use std::os::fd::AsFd;

    use nix::errno::Errno;

    use super::*;

    const PATH: &str = "/proc/sys/net/ipv4/conf/eth0/rp_filter";

    /// Sysctl files in memory, read-only like the DaemonSet's /proc/sys when asked, with a
    /// log of every access.
    #[derive(Default)]
    struct FakeSysctls {
        values: RefCell<BTreeMap<String, String>>,
        read_only: bool,
        log: RefCell<Vec<String>>,
    }

    impl FakeSysctls {
        fn with(path: &str, value: &str) -> Self {
            let fake = Self::default();
            fake.values.borrow_mut().insert(path.into(), value.into());
            fake
        }
    }

    impl SysctlFiles for FakeSysctls {
        fn read(&self, path: &str) -> io::Result<String> {
            self.log.borrow_mut().push(format!("read {path}"));
            self.values
                .borrow()
                .get(path)
                .cloned()
                .ok_or_else(|| io::Error::from_raw_os_error(Errno::ENOENT as i32))
        }

        fn write(&self, path: &str, value: &str) -> io::Result<()> {
            self.log.borrow_mut().push(format!("write {path} {value}"));
            if self.read_only {
                return Err(io::Error::from_raw_os_error(Errno::EROFS as i32));
            }
            self.values.borrow_mut().insert(path.into(), value.into());
            Ok(())
        }
    }

    #[test]
    fn an_already_loose_value_is_only_read() {
        let files = FakeSysctls {
            read_only: true,
            ..FakeSysctls::with(PATH, "2\n")
        };
        assert_eq!(make_loose(&files, PATH).unwrap(), None);
        assert_eq!(*files.log.borrow(), [format!("read {PATH}")]);
    }

    #[test]
    fn another_value_is_made_loose_and_returned() {
        let files = FakeSysctls::with(PATH, "1\n");
        assert_eq!(make_loose(&files, PATH).unwrap().as_deref(), Some("1"));
        assert_eq!(
            *files.log.borrow(),
            [format!("read {PATH}"), format!("write {PATH} 2")]
        );
        assert_eq!(files.values.borrow()[PATH], "2");
    }

    #[test]
    fn an_unreadable_file_is_an_error_naming_it_and_nothing_is_written() {
        let files = FakeSysctls::default();
        let err = make_loose(&files, PATH).unwrap_err();
        assert!(matches!(err, SnatError::Sysctl { ref path, .. } if path == PATH));
        assert_eq!(
            err.to_string(),
            format!("sysctl {PATH}: No such file or directory (os error 2)")
        );
        assert_eq!(*files.log.borrow(), [format!("read {PATH}")]);
    }

    #[test]
    fn a_failed_write_is_an_error_naming_the_file() {
        let files = FakeSysctls {
            read_only: true,
            ..FakeSysctls::with(PATH, "1")
        };
        let err = make_loose(&files, PATH).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("sysctl {PATH}: Read-only file system (os error 30)")
        );
    }

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
