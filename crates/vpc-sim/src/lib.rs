//! vpc-sim: an EC2 Query API + IMDS emulator and the VPC-in-a-box network fabric.
//!
//! The [`model`] is the single source of truth (pure, no I/O). The [`ec2`] router serves the EC2
//! Query API from it, the [`imds`] router serves one instance's metadata from a lagged view of it,
//! and [`fabric`] turns the same model into a routed VPC of namespaces and veths.
//!
//! [`faults`] makes EC2 misbehave on purpose (throttling, 5xx, slow answers, dropped
//! connections) by a plan set on the command line (`--fault-*`) or at runtime through
//! `PUT /_sim/faults`, so clients can be tested against an unreliable EC2. IMDS is never faulted.
//! Two more runtime controls on the EC2 endpoint make a node look misconfigured: [`iam`]
//! (`PUT /_sim/iam`) denies chosen EC2 actions with `UnauthorizedOperation`, and
//! [`imds::freeze`] (`PUT /_sim/imds`) keeps every instance's IMDS as it was while EC2 moves on.
//!
//! [`model::Fragment`] scatters addresses of other owners over a subnet's /28 blocks
//! (`--subnet ...,fragment=`, `PUT /_sim/fragment`, [`inproc::Account::set_fragment`]), so
//! prefix delegation fails with `InsufficientCidrBlocks` while single addresses do not.
//!
//! [`inproc`] is the same model, fault plan and IAM policy in process, without HTTP: the EC2
//! and IMDS the fleet (with EC2's latencies and request buckets) and daemon tests call.

pub mod clock;
pub mod config;
pub mod ec2;
pub mod fabric;
pub mod faults;
pub mod iam;
pub mod imds;
pub mod inproc;
pub mod launch;
pub mod model;
pub mod netns;
pub mod rand;
pub mod sim;
pub mod simfile;

pub use model::{Fragment, FragmentReport};
pub use sim::Sim;
