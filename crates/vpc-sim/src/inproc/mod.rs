//! The one in-process EC2 and IMDS over the [`crate::model`]: what daemon-level tests and the
//! fleet use instead of HTTP. An [`Account`] holds the model and stands in front of it as EC2
//! does: optionally a latency per call and EC2's account-wide request buckets (the fleet wants
//! both; a test wants instant answers), the same fault plan ([`crate::faults`]) and IAM policy
//! ([`crate::iam`]) the HTTP server applies, and test hooks (scripted failures, lost answers,
//! a log of every call). Every node gets handles ([`NodeEc2`], [`NodeImds`]) that implement
//! the traits ipamd's real clients do. No HTTP here.

mod account;
mod convert;
mod ec2;
mod imds;
mod options;

pub use account::{Account, Tally};
pub use ec2::NodeEc2;
pub use imds::NodeImds;
pub use options::{Buckets, DESCRIBE_BUCKET, IMDS_LAG, MUTATE_BUCKET, Options, ec2_latency};

#[cfg(test)]
mod tests;
