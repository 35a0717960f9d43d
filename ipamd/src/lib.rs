//! ipamd: the node daemon that keeps VPC addresses for pods, persists every assignment and
//! answers the `vpc-cni` plugin over a Unix socket.

pub mod clock;
pub mod config;
mod convert;
pub mod daemon;
pub mod doctor;
mod durability;
pub mod host;
mod host_error;
pub mod install;
pub mod logging;
mod nodenet;
pub mod publish;
pub mod residency;
pub mod server;
pub mod state;
pub mod surface;

pub use daemon::{Daemon, Parts, StartupError, VETH_GRACE};

/// How often the controller looks at the pool when nothing asks it to.
pub const CONTROLLER_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// How often ipamd looks for host veths without a pod route when no DEL prompts it: for those
/// left while it was down, or by a plugin that died mid-ADD.
pub const VETH_SWEEP_PERIOD: std::time::Duration = std::time::Duration::from_secs(60);
