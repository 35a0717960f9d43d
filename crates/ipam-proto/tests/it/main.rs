//! The integration tests of `ipam-proto`, one binary with a module per scenario file.

mod fuzz_corpus;
