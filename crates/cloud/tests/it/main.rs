//! The integration tests of `cloud`, one binary with a module per scenario file.

mod moto_smoke;
