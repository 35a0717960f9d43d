//! The integration tests of `pool`, one binary with a module per scenario file.

mod common;

mod datastore;
mod demand;
mod explain;
mod fragment;
mod golden;
mod plan;
mod properties;
mod v6;
