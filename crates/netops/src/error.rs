//! The one error type of this crate.

use std::io;
use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = NetlinkError> = std::result::Result<T, E>;

/// Why a netlink or namespace operation failed.
///
/// Every variant that comes from the kernel names the operation it was doing, so a message
/// reads like `add route 10.0.0.5/32 dev eni1234: File exists (os error 17)`.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel answered the request with an error code.
    #[error("{op}: {}{}", io::Error::from_raw_os_error(*.errno), ext_ack_suffix(.ext_ack))]
    Kernel {
        /// What we asked for, in `ip`-like words.
        op: String,
        /// The positive errno the kernel returned.
        errno: i32,
        /// The kernel's extended-ack explanation, when it gave one.
        ext_ack: Option<String>,
    },
    /// Talking to the netlink socket itself failed (not a verdict on the request).
    #[error("{op}: netlink socket: {source}")]
    Socket {
        /// What we were doing.
        op: String,
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// The kernel's reply could not be decoded.
    #[error("{op}: cannot decode netlink reply: {reason}")]
    Decode {
        /// What we were doing.
        op: String,
        /// What was wrong with the reply.
        reason: String,
    },
    /// The network namespace path does not exist.
    #[error("network namespace {} does not exist", .path.display())]
    NetnsNotFound {
        /// The path we were given.
        path: PathBuf,
    },
    /// The path exists but is not a network namespace (e.g. a stale bind-mount point).
    #[error("{} is not a network namespace", .path.display())]
    NotANetns {
        /// The path we were given.
        path: PathBuf,
    },
    /// Opening or entering a network namespace failed.
    #[error("network namespace {}: {action}: {source}", .path.display())]
    Netns {
        /// The namespace involved.
        path: PathBuf,
        /// `open`, `enter` or `return to the original namespace`.
        action: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The interface the runtime asked for already exists in the pod namespace.
    #[error("interface {name} already exists in the pod network namespace")]
    ContainerIfaceExists {
        /// The interface name (CNI_IFNAME).
        name: String,
    },
    /// The OS random source failed.
    #[error("random source: {0}")]
    Random(String),
    /// No link carries the MAC address (a hot-plugged ENI may not have appeared yet).
    #[error("no link with MAC address {mac}")]
    NoLinkWithMac {
        /// The MAC address looked for.
        mac: String,
    },
    /// A caller-supplied value cannot be used.
    #[error("invalid {what}: {why}")]
    Invalid {
        /// Which input.
        what: &'static str,
        /// What is wrong with it.
        why: String,
    },
}

fn ext_ack_suffix(ext_ack: &Option<String>) -> String {
    ext_ack
        .as_deref()
        .map(|m| format!(" ({m})"))
        .unwrap_or_default()
}

impl NetlinkError {
    /// The kernel errno, when the kernel rejected a request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// True when the thing operated on is not there: a missing link, address, route, rule or
    /// neighbour, or a missing (or no longer valid) network namespace. Teardown treats this as
    /// success.
    pub fn is_not_found(&self) -> bool {
        match self {
            NetlinkError::Kernel { errno, .. } => matches!(
                *errno,
                libc_errno::ENOENT
                    | libc_errno::ESRCH
                    | libc_errno::ENODEV
                    | libc_errno::EADDRNOTAVAIL
            ),
            NetlinkError::NetnsNotFound { .. } | NetlinkError::NotANetns { .. } => true,
            _ => false,
        }
    }

    /// True when the kernel refused to create something because it already exists.
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(libc_errno::EEXIST)
    }

    /// Replaces the operation text, for callers that can describe it better (names instead of
    /// interface indexes). Variants without an operation are returned unchanged.
    pub fn with_op(mut self, new_op: impl Into<String>) -> Self {
        match &mut self {
            NetlinkError::Kernel { op, .. }
            | NetlinkError::Socket { op, .. }
            | NetlinkError::Decode { op, .. } => {
                *op = new_op.into();
            }
            _ => {}
        }
        self
    }
}

/// The errno values this crate interprets (from nix, so they match the platform).
pub(crate) mod libc_errno {
    use nix::errno::Errno;

    pub const ENOENT: i32 = Errno::ENOENT as i32;
    pub const ESRCH: i32 = Errno::ESRCH as i32;
    pub const ENODEV: i32 = Errno::ENODEV as i32;
    pub const EADDRNOTAVAIL: i32 = Errno::EADDRNOTAVAIL as i32;
    pub const EEXIST: i32 = Errno::EEXIST as i32;
    pub const EIO: i32 = Errno::EIO as i32;
    #[cfg(test)]
    pub const EINVAL: i32 = Errno::EINVAL as i32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_error_reads_like_ip() {
        let e = NetlinkError::Kernel {
            op: "add route 10.0.0.5/32 dev eni1234".into(),
            errno: libc_errno::EEXIST,
            ext_ack: None,
        };
        assert_eq!(
            e.to_string(),
            "add route 10.0.0.5/32 dev eni1234: File exists (os error 17)"
        );
        assert!(e.is_exists());
        assert!(!e.is_not_found());
    }

    #[test]
    fn ext_ack_is_appended() {
        let e = NetlinkError::Kernel {
            op: "add route 0.0.0.0/0 via 169.254.1.1".into(),
            errno: libc_errno::EINVAL,
            ext_ack: Some("Nexthop has invalid gateway".into()),
        };
        assert_eq!(
            e.to_string(),
            "add route 0.0.0.0/0 via 169.254.1.1: Invalid argument (os error 22) (Nexthop has invalid gateway)"
        );
    }

    #[test]
    fn not_found_family() {
        for errno in [
            libc_errno::ENOENT,
            libc_errno::ESRCH,
            libc_errno::ENODEV,
            libc_errno::EADDRNOTAVAIL,
        ] {
            let e = NetlinkError::Kernel {
                op: "x".into(),
                errno,
                ext_ack: None,
            };
            assert!(e.is_not_found(), "errno {errno}");
        }
        assert!(
            NetlinkError::NetnsNotFound {
                path: "/nope".into()
            }
            .is_not_found()
        );
    }

    #[test]
    fn with_op_replaces_only_the_operation() {
        let e = NetlinkError::Kernel {
            op: "add route 10.0.0.5/32 oif 7".into(),
            errno: libc_errno::EEXIST,
            ext_ack: None,
        }
        .with_op("add route 10.0.0.5/32 dev eni1");
        assert_eq!(e.errno(), Some(libc_errno::EEXIST));
        assert!(
            e.to_string()
                .starts_with("add route 10.0.0.5/32 dev eni1: ")
        );
    }
}
