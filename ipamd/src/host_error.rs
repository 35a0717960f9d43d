//! The error of the node's network operations ([`crate::host::HostNetwork`] and the node setup
//! in `nodenet`), in a module of its own so that both use it and neither uses the other's.

use thiserror::Error;

/// A host network operation that failed.
#[derive(Debug, Error)]
pub enum HostError {
    /// The ENI's link has not appeared yet (hot-plug lags the attachment): try again.
    #[error("no link with MAC {0} yet")]
    LinkNotFound(String),
    /// The MAC is not one.
    #[error("{0:?} is not a MAC address")]
    BadMac(String),
    /// A netlink operation failed.
    #[error(transparent)]
    Netlink(netops::NetlinkError),
    /// The SNAT, connmark or rp_filter setup failed.
    #[error(transparent)]
    Snat(#[from] netops::snat::SnatError),
    /// The blocking task doing the work failed (panicked or was cancelled).
    #[error("host network task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl From<netops::NetlinkError> for HostError {
    fn from(e: netops::NetlinkError) -> Self {
        match e {
            netops::NetlinkError::NoLinkWithMac { mac } => HostError::LinkNotFound(mac),
            other => HostError::Netlink(other),
        }
    }
}
