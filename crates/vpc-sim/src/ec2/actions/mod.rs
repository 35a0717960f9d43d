//! One module per group of EC2 actions.

pub mod addresses;
pub mod addresses6;
pub mod attach;
pub mod describe_enis;
pub mod enis;
pub mod instance_types;
pub mod instances;
pub mod render;
pub mod security_groups;
pub mod subnets;
pub mod tags;
