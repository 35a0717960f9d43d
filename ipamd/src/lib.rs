//! ipamd: the node daemon that keeps VPC addresses for pods, persists every assignment and
//! answers the `vpc-cni` plugin over a Unix socket.

pub mod clock;
pub mod config;
mod convert;
pub mod daemon;
mod durability;
pub mod host;
pub mod install;
pub mod logging;
mod nodenet;
pub mod server;
pub mod state;
pub mod surface;

pub use daemon::{Daemon, Parts, StartupError};

/// How often the controller looks at the pool when nothing asks it to.
pub const CONTROLLER_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);
