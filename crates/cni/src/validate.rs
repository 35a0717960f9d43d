//! Name rules shared by libcni and skel (`pkg/utils/utils.go`).

use crate::error::CniError;

/// Linux `IFNAMSIZ` minus the terminating NUL.
pub const MAX_IFNAME_LEN: usize = 15;

/// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`: the rule for container ids and network names.
pub fn is_cni_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    match bytes.next() {
        Some(first) if first.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// `CNI_CONTAINERID` must be non-empty and match [`is_cni_identifier`]; code 4 otherwise.
pub fn validate_container_id(id: &str) -> Result<(), CniError> {
    if id.is_empty() {
        return Err(CniError::invalid_env("CNI_CONTAINERID is empty"));
    }
    if !is_cni_identifier(id) {
        return Err(CniError::invalid_env(format!(
            "invalid characters in CNI_CONTAINERID {id:?}: must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$"
        )));
    }
    Ok(())
}

/// The network `name` follows the container-id rule; code 7 otherwise.
pub fn validate_network_name(name: &str) -> Result<(), CniError> {
    if name.is_empty() {
        return Err(CniError::invalid_config("missing network name"));
    }
    if !is_cni_identifier(name) {
        return Err(CniError::invalid_config(format!(
            "invalid characters found in network name {name:?}: must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$"
        )));
    }
    Ok(())
}

/// Which interface-name rule a name breaks, if any.
pub(crate) fn ifname_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty".into());
    }
    if name.len() > MAX_IFNAME_LEN {
        return Some(format!(
            "is {} bytes long, at most {MAX_IFNAME_LEN} allowed",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Some("must not be \".\" or \"..\"".into());
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return Some("must not contain '/', ':' or whitespace".into());
    }
    None
}

/// `CNI_IFNAME`: 1–15 bytes, not `.`/`..`, no `/`, `:` or whitespace; code 4 naming the rule.
pub fn validate_ifname(name: &str) -> Result<(), CniError> {
    match ifname_problem(name) {
        None => Ok(()),
        Some(problem) => Err(CniError::invalid_env(format!(
            "invalid CNI_IFNAME {name:?}: interface name {problem}"
        ))),
    }
}
