//! vpc-sim: an EC2 Query API + IMDS emulator and the VPC-in-a-box network fabric.
//!
//! The [`model`] is the single source of truth (pure, no I/O). The [`ec2`] router serves the EC2
//! Query API from it, the [`imds`] router serves one instance's metadata from a lagged view of it,
//! and [`fabric`] turns the same model into a routed VPC of namespaces and veths.

pub mod clock;
pub mod config;
pub mod ec2;
pub mod fabric;
pub mod imds;
pub mod launch;
pub mod model;
pub mod netns;
pub mod rand;
pub mod sim;
pub mod simfile;

pub use sim::Sim;
