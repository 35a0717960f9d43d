//! Shared by the integration tests: a fake ipamd, a runner for the real binary, and
//! throw-away network namespaces for the root tests. Not every test binary uses every helper.

pub mod fake_ipamd;
pub mod netns;
pub mod plugin;
