//! The integration tests of `ipamd`, one binary with a module per scenario file.

mod support;

mod cluster;
mod daemon;
mod damaged_state;
mod docs;
mod enis;
mod ipv6;
mod lost_answers;
mod prefix_fallback;
mod recovery;
mod scheduler;
mod shrink;
mod socket;
