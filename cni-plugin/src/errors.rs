//! How failures to talk to ipamd become CNI errors, per verb. Pure: no I/O, unit-tested.
//!
//! The spec's code 11 ("try again later") tells the runtime the condition is transient;
//! kubelet retries a failed sandbox anyway, but 11 lets operators and tools tell "the node is
//! out of addresses / ipamd restarting" apart from a bug (999).

use cni::CniError;
use ipam_proto::{AttachmentKey, ClientError, DaemonError, ErrorKind};

/// The Go CNI's famous ADD failure text, kept so existing alerts and habits (`grep`) work.
pub const ADD_FAILED_PREFIX: &str = "failed to assign an IP address to container";

/// True when waiting may help: ipamd unreachable, the connection failed or timed out, ipamd
/// still starting, or no address free right now.
fn is_transient(err: &ClientError) -> bool {
    match err {
        ClientError::Unavailable { .. } | ClientError::Io { .. } => true,
        ClientError::Daemon(DaemonError { kind, .. }) => {
            matches!(kind, ErrorKind::NotReady | ErrorKind::NoAddresses)
        }
        ClientError::Protocol { .. } | ClientError::WrongReply { .. } => false,
    }
}

/// ADD: ipamd could not give an address. The message is ipamd's (it names the reason, e.g.
/// which subnet is exhausted) after [`ADD_FAILED_PREFIX`].
pub fn add_failed(err: &ClientError) -> CniError {
    let msg = format!("{ADD_FAILED_PREFIX}: {err}");
    if is_transient(err) {
        CniError::try_again_later(msg)
    } else {
        CniError::internal(msg)
    }
}

/// What a failed ipamd DEL means for the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelFailure {
    /// ipamd holds nothing for the attachment: same as a reply with nothing released.
    NothingHeld,
    /// ipamd could not be asked (down, connection lost, timed out, unusable reply). Tear down
    /// locally from `prevResult` and succeed: failing would wedge sandbox removal for as long
    /// as ipamd is away. ipamd releases, when it starts, every address whose route is gone
    /// from the node, and the runtime's GC catches the rest.
    Unreachable,
    /// ipamd answered with an error (e.g. its store failed): tear down locally, then fail
    /// with this error so the runtime retries the DEL and ipamd gets to release the address.
    Retry(CniError),
}

/// Classifies a failed ipamd DEL.
pub fn del_failed(err: &ClientError) -> DelFailure {
    match err {
        ClientError::Daemon(DaemonError {
            kind: ErrorKind::UnknownAttachment,
            ..
        }) => DelFailure::NothingHeld,
        ClientError::Daemon(e) => DelFailure::Retry(CniError::try_again_later(format!(
            "ipamd could not release the address: {e}"
        ))),
        ClientError::Unavailable { .. }
        | ClientError::Io { .. }
        | ClientError::Protocol { .. }
        | ClientError::WrongReply { .. } => DelFailure::Unreachable,
    }
}

/// CHECK: ipamd must vouch for the attachment; a daemon required for connectivity that is
/// missing is a CHECK failure (spec), reported as transient.
pub fn check_failed(err: &ClientError, key: &AttachmentKey) -> CniError {
    match err {
        ClientError::Daemon(DaemonError {
            kind: ErrorKind::UnknownAttachment,
            message,
            ..
        }) => CniError::internal(format!("ipamd holds no address for {key}"))
            .with_details(message.clone()),
        ClientError::Unavailable { .. } | ClientError::Io { .. } => {
            CniError::try_again_later(format!("ipamd not reachable: {err}"))
        }
        _ if is_transient(err) => CniError::try_again_later(format!("ipamd check failed: {err}")),
        _ => CniError::internal(format!("ipamd check failed: {err}")),
    }
}

/// STATUS: every failure means "cannot service ADD now" (code 50).
pub fn status_failed(err: &ClientError, socket: &str) -> CniError {
    match err {
        ClientError::Unavailable { source, .. } => {
            CniError::not_available(format!("ipamd not reachable at {socket}: {source}"))
        }
        ClientError::Daemon(e) => CniError::not_available(format!("ipamd is not ready: {e}")),
        other => CniError::not_available(format!("ipamd status failed: {other}")),
    }
}

/// STATUS: ipamd answered "not ready".
pub fn not_ready(reason: Option<&str>) -> CniError {
    match reason.filter(|r| !r.is_empty()) {
        Some(reason) => CniError::not_available(format!("ipamd is not ready: {reason}")),
        None => CniError::not_available("ipamd is not ready (it gave no reason)"),
    }
}

/// GC: ipamd could not run the collection.
pub fn gc_failed(err: &ClientError) -> CniError {
    match err {
        ClientError::Unavailable { .. } | ClientError::Io { .. } => {
            CniError::try_again_later(format!("ipamd not reachable: {err}"))
        }
        _ if is_transient(err) => CniError::try_again_later(format!("ipamd gc failed: {err}")),
        _ => CniError::internal(format!("ipamd gc failed: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::PathBuf;

    use ipam_proto::FrameError;

    use super::*;

    const SOCK: &str = "/run/vpc-cni/ipamd.sock";

    fn daemon(kind: ErrorKind, message: &str) -> ClientError {
        ClientError::Daemon(DaemonError::new(kind, message))
    }

    fn unavailable() -> ClientError {
        ClientError::Unavailable {
            path: PathBuf::from(SOCK),
            source: io::Error::from(io::ErrorKind::NotFound),
        }
    }

    fn timeout() -> ClientError {
        ClientError::Io {
            path: PathBuf::from(SOCK),
            source: io::Error::from(io::ErrorKind::WouldBlock),
        }
    }

    fn reset() -> ClientError {
        ClientError::Io {
            path: PathBuf::from(SOCK),
            source: io::Error::from(io::ErrorKind::ConnectionReset),
        }
    }

    fn protocol() -> ClientError {
        ClientError::Protocol {
            path: PathBuf::from(SOCK),
            source: FrameError::VersionMismatch { peer: 2, ours: 1 },
        }
    }

    fn wrong_reply() -> ClientError {
        ClientError::WrongReply {
            asked: "add",
            got: "del",
        }
    }

    fn key() -> AttachmentKey {
        AttachmentKey {
            network: "aws-cni".into(),
            container_id: "c1".into(),
            ifname: "eth0".into(),
        }
    }

    #[test]
    fn add_error_table() {
        let exhausted = "no free address: subnet subnet-1 (10.0.0.0/24) is exhausted";
        let cases: Vec<(ClientError, u32, &str)> = vec![
            (
                unavailable(),
                11,
                "ipamd is not reachable at /run/vpc-cni/ipamd.sock",
            ),
            (timeout(), 11, "talking to ipamd"),
            (reset(), 11, "talking to ipamd"),
            (
                daemon(ErrorKind::NotReady, "restoring state"),
                11,
                "restoring state",
            ),
            (daemon(ErrorKind::NoAddresses, exhausted), 11, exhausted),
            (
                daemon(ErrorKind::VersionMismatch, "plugin speaks 2"),
                999,
                "plugin speaks 2",
            ),
            (
                daemon(ErrorKind::BadRequest, "missing key"),
                999,
                "missing key",
            ),
            (daemon(ErrorKind::Forbidden, "uid 1000"), 999, "uid 1000"),
            (
                daemon(ErrorKind::Internal, "sled flush failed"),
                999,
                "sled flush failed",
            ),
            (daemon(ErrorKind::Unknown, "new kind"), 999, "new kind"),
            (daemon(ErrorKind::UnknownAttachment, "x"), 999, "x"),
            (protocol(), 999, "protocol version mismatch"),
            (wrong_reply(), 999, "answered del to a add request"),
        ];
        for (err, code, needle) in cases {
            let cni = add_failed(&err);
            assert_eq!(cni.code, code, "{err:?}");
            assert!(
                cni.msg
                    .starts_with("failed to assign an IP address to container: "),
                "{}",
                cni.msg
            );
            assert!(cni.msg.contains(needle), "{:?} lacks {needle:?}", cni.msg);
        }
    }

    #[test]
    fn del_error_table() {
        assert_eq!(
            del_failed(&daemon(ErrorKind::UnknownAttachment, "unknown")),
            DelFailure::NothingHeld
        );
        for err in [unavailable(), timeout(), reset(), protocol(), wrong_reply()] {
            assert_eq!(del_failed(&err), DelFailure::Unreachable, "{err:?}");
        }
        for kind in [
            ErrorKind::Internal,
            ErrorKind::NotReady,
            ErrorKind::VersionMismatch,
            ErrorKind::BadRequest,
            ErrorKind::Forbidden,
            ErrorKind::NoAddresses,
            ErrorKind::Unknown,
        ] {
            match del_failed(&daemon(kind, "store write failed")) {
                DelFailure::Retry(e) => {
                    assert_eq!(e.code, 11, "{kind:?}");
                    assert!(e.msg.contains("store write failed"), "{}", e.msg);
                }
                other => panic!("{kind:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn check_error_table() {
        let e = check_failed(&unavailable(), &key());
        assert_eq!(e.code, 11);
        assert!(e.msg.starts_with("ipamd not reachable: "), "{}", e.msg);
        assert_eq!(check_failed(&timeout(), &key()).code, 11);

        let e = check_failed(&daemon(ErrorKind::UnknownAttachment, "no such key"), &key());
        assert_eq!(e.code, 999);
        assert_eq!(e.msg, "ipamd holds no address for aws-cni/c1/eth0");
        assert_eq!(e.details, "no such key");

        assert_eq!(
            check_failed(&daemon(ErrorKind::NotReady, "x"), &key()).code,
            11
        );
        let e = check_failed(&daemon(ErrorKind::Internal, "boom"), &key());
        assert_eq!(e.code, 999);
        assert!(e.msg.contains("boom"), "{}", e.msg);
        assert_eq!(check_failed(&protocol(), &key()).code, 999);
    }

    #[test]
    fn status_error_table() {
        let e = status_failed(&unavailable(), SOCK);
        assert_eq!(e.code, 50);
        assert!(
            e.msg
                .starts_with("ipamd not reachable at /run/vpc-cni/ipamd.sock: "),
            "{}",
            e.msg
        );
        for err in [
            timeout(),
            protocol(),
            daemon(ErrorKind::NotReady, "restoring"),
        ] {
            assert_eq!(status_failed(&err, SOCK).code, 50, "{err:?}");
        }
        let e = not_ready(Some("no ENI has free addresses"));
        assert_eq!(e.code, 50);
        assert!(e.msg.contains("no ENI has free addresses"), "{}", e.msg);
        assert_eq!(not_ready(None).code, 50);
        assert_eq!(not_ready(Some("")).msg, not_ready(None).msg);
    }

    #[test]
    fn gc_error_table() {
        assert_eq!(gc_failed(&unavailable()).code, 11);
        assert_eq!(gc_failed(&timeout()).code, 11);
        assert_eq!(gc_failed(&daemon(ErrorKind::NotReady, "x")).code, 11);
        let e = gc_failed(&daemon(ErrorKind::Internal, "store"));
        assert_eq!(e.code, 999);
        assert!(e.msg.contains("store"), "{}", e.msg);
    }
}
