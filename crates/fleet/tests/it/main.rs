//! The integration tests of `fleet`, one binary with a module per scenario file.

mod scenarios;
