//! The integration tests of `logfile`, one binary with a module per scenario file.

mod processes;
