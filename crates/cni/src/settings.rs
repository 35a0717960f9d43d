//! The rules of the settings that the plugin's conf, ipamd's environment and the installer that
//! writes the conf from that environment all read: one definition each, so the three never
//! accept different values.

use thiserror::Error;

use crate::validate::ifname_problem;

/// Default MTU of the pod's interface and the ENIs (jumbo frames, as the Go CNI).
pub const DEFAULT_MTU: u32 = 9001;
/// Smallest accepted MTU (the IPv4 minimum datagram a host must accept).
pub const MIN_MTU: u32 = 576;
/// Largest accepted MTU (the EC2 jumbo-frame maximum).
pub const MAX_MTU: u32 = 9001;
/// Default prefix of the host-side veth names.
pub const DEFAULT_VETH_PREFIX: &str = "eni";
/// Longest veth prefix: it is followed by 11 hex chars within the 15-byte interface name.
pub const MAX_VETH_PREFIX_LEN: usize = 4;
/// Prefixes that would collide with interfaces the node already has (as the Go CNI refuses).
pub const RESERVED_VETH_PREFIXES: &[&str] = &["eth", "lo", "vlan"];

/// A setting outside its rule; the text says the rule.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SettingError {
    /// An MTU outside [`MIN_MTU`]..=[`MAX_MTU`].
    #[error("must be a whole number from {MIN_MTU} to {MAX_MTU}")]
    Mtu,
    /// A veth prefix of the wrong length.
    #[error("must be 1 to {MAX_VETH_PREFIX_LEN} characters long, got {0}")]
    VethPrefixLength(usize),
    /// A veth prefix the node's own interfaces use.
    #[error("eth, lo and vlan are reserved for the node's own interfaces")]
    VethPrefixReserved,
    /// A veth prefix that cannot start an interface name.
    #[error("as the start of an interface name it {0}")]
    VethPrefixChars(String),
}

/// Checks an MTU.
pub fn check_mtu(mtu: u64) -> Result<u32, SettingError> {
    u32::try_from(mtu)
        .ok()
        .filter(|m| (MIN_MTU..=MAX_MTU).contains(m))
        .ok_or(SettingError::Mtu)
}

/// Checks a veth prefix: 1 to 4 bytes, not a reserved name, and nothing an interface name
/// cannot hold (`/`, `:`, whitespace).
pub fn check_veth_prefix(prefix: &str) -> Result<(), SettingError> {
    if prefix.is_empty() || prefix.len() > MAX_VETH_PREFIX_LEN {
        return Err(SettingError::VethPrefixLength(prefix.len()));
    }
    if RESERVED_VETH_PREFIXES.contains(&prefix) {
        return Err(SettingError::VethPrefixReserved);
    }
    match ifname_problem(prefix) {
        Some(problem) => Err(SettingError::VethPrefixChars(problem)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtus_from_576_to_9001_are_accepted() {
        assert_eq!(check_mtu(576), Ok(576));
        assert_eq!(check_mtu(9001), Ok(9001));
        for bad in [0, 575, 9002, u64::from(u32::MAX) + 1] {
            assert_eq!(check_mtu(bad), Err(SettingError::Mtu), "{bad}");
        }
    }

    #[test]
    fn veth_prefixes_follow_one_rule() {
        for good in ["eni", "a", "veth", "x-1"] {
            assert_eq!(check_veth_prefix(good), Ok(()), "{good}");
        }
        assert_eq!(
            check_veth_prefix(""),
            Err(SettingError::VethPrefixLength(0))
        );
        assert_eq!(
            check_veth_prefix("toolong"),
            Err(SettingError::VethPrefixLength(7))
        );
        for reserved in RESERVED_VETH_PREFIXES {
            assert_eq!(
                check_veth_prefix(reserved),
                Err(SettingError::VethPrefixReserved)
            );
        }
        for bad in ["a/b", "a:b", "a b"] {
            assert!(
                matches!(
                    check_veth_prefix(bad),
                    Err(SettingError::VethPrefixChars(_))
                ),
                "{bad}"
            );
        }
    }
}
