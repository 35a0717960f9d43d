//! The integration tests of `store`, one binary with a module per scenario file.

mod checkpoint;
