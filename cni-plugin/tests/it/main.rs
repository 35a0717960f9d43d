//! The integration tests of `cni-plugin`, one binary with a module per scenario file.

mod support;

mod defaults;
mod plugin;
mod root;
mod root_ipv6;
