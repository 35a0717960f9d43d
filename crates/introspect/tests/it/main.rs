//! The integration tests of `introspect`, one binary with a module per scenario file.

mod common;

mod endpoints;
mod garbage;
mod hardening;
mod metrics;
mod promtool;
mod serve;
