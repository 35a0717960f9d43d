//! The integration tests of `fleet`, one binary with a module per file.

mod go_cni;
mod networking;
mod scenarios;
