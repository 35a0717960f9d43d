//! The CNI contract as libcni and skel enforce it, without I/O: the caller passes environment
//! lookups and stdin bytes in, and prints what comes back.
//!
//! - [`Invocation::from_env`]: the `CNI_*` variables (skel's rules, lenient `CNI_PATH`).
//! - [`parse_cni_args`]: `CNI_ARGS` into [`K8sArgs`].
//! - [`NetConf::parse`]: the stdin config, version gating per verb, `prevResult`.
//! - [`CniResult`]: one result model printed in the shape of any [`CniVersion`].
//! - [`CniError`]: spec error codes and the error JSON.
//! - [`version_reply`]: the VERSION verb.
#![warn(missing_docs)]

mod args;
mod conf;
mod env;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod json;
mod result;
pub mod settings;
mod validate;
mod version;

pub use args::{K8sArgs, parse_cni_args};
pub use conf::{
    Attachment, DEFAULT_IPAMD_SOCKET, LEGACY_ATTACHMENTS_KEY, NetConf, VALID_ATTACHMENTS_KEY,
};
pub use env::{Command, Invocation, about_message, about_requested};
pub use error::CniError;
pub use result::{CniResult, Dns, Interface, IpConfig, Route};
pub use settings::{
    DEFAULT_MTU, DEFAULT_VETH_PREFIX, MAX_MTU, MAX_VETH_PREFIX_LEN, MIN_MTU, RESERVED_VETH_PREFIXES,
};
pub use validate::{
    MAX_IFNAME_LEN, is_cni_identifier, validate_container_id, validate_ifname,
    validate_network_name,
};
pub use version::{CniVersion, SUPPORTED_VERSIONS, parse_version_request, version_reply};
