//! The integration tests of `vpc-sim`, one binary with a module per scenario file.

mod common;

mod binary_fabric;
mod binary_loopback;
mod ec2_api;
mod ec2_follower;
mod ec2_ipv6;
mod ec2_sdk;
mod fabric_vpc;
mod faults;
mod fragment;
mod imds_api;
mod sim_controls;
