//! ipamd: the node daemon that keeps VPC addresses for pods, persists every assignment and
//! answers the `vpc-cni` plugin over a Unix socket.

pub mod clock;
pub mod config;
mod convert;
pub mod daemon;
mod durability;
pub mod logging;
pub mod retry;
pub mod server;

pub use daemon::{Daemon, StartupError};
