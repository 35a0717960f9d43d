//! The integration tests of `netops`, one binary with a module per scenario file.

mod support;

mod eni_root;
mod root_ipv6;
mod root_netns;
mod snat_root;
