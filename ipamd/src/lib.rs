//! ipamd: the node daemon that keeps VPC addresses for pods, persists every assignment and
//! answers the `vpc-cni` plugin over a Unix socket.

pub mod clock;
pub mod config;
mod convert;
pub mod daemon;
mod durability;
pub mod host;
pub mod logging;
mod nodenet;
pub mod retry;
pub mod server;

pub use daemon::{Daemon, Parts, StartupError};
