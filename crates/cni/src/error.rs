//! The CNI error result (spec "Error" section) and its well-known codes.

use serde_json::{Map, Value};

/// A CNI error: what a plugin prints on stdout (as JSON) before exiting non-zero.
///
/// `code` is one of the associated constants for spec-defined failures; codes 100 and up are
/// free for plugin-specific use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CNI error {code}: {msg}{}", details_suffix(.details))]
pub struct CniError {
    /// Error code: 0–99 are reserved by the spec, 100+ are plugin-specific.
    pub code: u32,
    /// Short message naming the problem.
    pub msg: String,
    /// Longer explanation; omitted from the JSON when empty.
    pub details: String,
}

fn details_suffix(details: &str) -> String {
    if details.is_empty() {
        String::new()
    } else {
        format!(" ({details})")
    }
}

impl CniError {
    /// Code 1: the config's `cniVersion` is not supported, or does not allow the verb.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Code 2: unsupported field in the network configuration.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// Code 3: the container is unknown or does not exist.
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// Code 4: invalid or missing `CNI_*` environment variables.
    pub const INVALID_ENV: u32 = 4;
    /// Code 5: I/O failure (e.g. reading stdin).
    pub const IO_FAILURE: u32 = 5;
    /// Code 6: content could not be decoded (config JSON, `prevResult`).
    pub const DECODING_FAILURE: u32 = 6;
    /// Code 7: the network configuration failed validation.
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    /// Code 8 (Go library extra, not in the spec table): the plugin runs in `CNI_NETNS` itself.
    pub const INVALID_NETNS: u32 = 8;
    /// Code 11: transient condition; the runtime should retry later.
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// Code 50 (STATUS): the plugin cannot service ADD requests.
    pub const NOT_AVAILABLE: u32 = 50;
    /// Code 51 (STATUS): not available, and existing containers may have limited connectivity.
    pub const NOT_AVAILABLE_LIMITED_CONNECTIVITY: u32 = 51;
    /// Code 999 (Go library extra): any other failure.
    pub const INTERNAL: u32 = 999;

    /// An error with the given code and message, no details.
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// The same error with `details` set.
    #[must_use]
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Code 1, [`Self::INCOMPATIBLE_VERSION`].
    pub fn incompatible_version(msg: impl Into<String>) -> Self {
        Self::new(Self::INCOMPATIBLE_VERSION, msg)
    }

    /// Code 2, [`Self::UNSUPPORTED_FIELD`]; the spec wants the key and value in the message.
    pub fn unsupported_field(key: &str, value: &str) -> Self {
        Self::new(
            Self::UNSUPPORTED_FIELD,
            format!("unsupported field {key:?} with value {value:?}"),
        )
    }

    /// Code 3, [`Self::UNKNOWN_CONTAINER`].
    pub fn unknown_container(msg: impl Into<String>) -> Self {
        Self::new(Self::UNKNOWN_CONTAINER, msg)
    }

    /// Code 4, [`Self::INVALID_ENV`].
    pub fn invalid_env(msg: impl Into<String>) -> Self {
        Self::new(Self::INVALID_ENV, msg)
    }

    /// Code 5, [`Self::IO_FAILURE`].
    pub fn io_failure(msg: impl Into<String>) -> Self {
        Self::new(Self::IO_FAILURE, msg)
    }

    /// Code 6, [`Self::DECODING_FAILURE`].
    pub fn decoding_failure(msg: impl Into<String>) -> Self {
        Self::new(Self::DECODING_FAILURE, msg)
    }

    /// Code 7, [`Self::INVALID_NETWORK_CONFIG`].
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        Self::new(Self::INVALID_NETWORK_CONFIG, msg)
    }

    /// Code 8, [`Self::INVALID_NETNS`].
    pub fn invalid_netns(msg: impl Into<String>) -> Self {
        Self::new(Self::INVALID_NETNS, msg)
    }

    /// Code 11, [`Self::TRY_AGAIN_LATER`].
    pub fn try_again_later(msg: impl Into<String>) -> Self {
        Self::new(Self::TRY_AGAIN_LATER, msg)
    }

    /// Code 50, [`Self::NOT_AVAILABLE`].
    pub fn not_available(msg: impl Into<String>) -> Self {
        Self::new(Self::NOT_AVAILABLE, msg)
    }

    /// Code 51, [`Self::NOT_AVAILABLE_LIMITED_CONNECTIVITY`].
    pub fn not_available_limited_connectivity(msg: impl Into<String>) -> Self {
        Self::new(Self::NOT_AVAILABLE_LIMITED_CONNECTIVITY, msg)
    }

    /// Code 999, [`Self::INTERNAL`].
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(Self::INTERNAL, msg)
    }

    /// The error object as the spec defines it: `{"cniVersion","code","msg","details"}`.
    ///
    /// `cniVersion` is the protocol version in use; pass `None` when it is not known (e.g. the
    /// config could not be parsed) and the key is left out, as Go plugins always do. `details`
    /// is left out when empty.
    pub fn to_json(&self, version: Option<&str>) -> String {
        let mut obj = Map::new();
        if let Some(v) = version {
            obj.insert("cniVersion".into(), Value::from(v));
        }
        obj.insert("code".into(), Value::from(self.code));
        obj.insert("msg".into(), Value::from(self.msg.as_str()));
        if !self.details.is_empty() {
            obj.insert("details".into(), Value::from(self.details.as_str()));
        }
        Value::Object(obj).to_string()
    }
}
