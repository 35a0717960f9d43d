//! Host veth names, MAC addresses.

use std::fmt::Write;

use sha1::{Digest, Sha1};

use crate::error::{NetlinkError, Result};

/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;

/// The host-side veth name of a pod: `prefix` + the first 11 hex characters of
/// SHA-1(`"<namespace>.<pod_name>"`).
///
/// Same scheme as the Go AWS VPC CNI and Calico, so node tools and ipamd's live-pod detection
/// keep working. With the default prefix `eni` the name is 14 characters; the prefix must be
/// at most 4 characters for the name to fit [`IFNAME_MAX`].
pub fn veth_name(prefix: &str, namespace: &str, pod_name: &str) -> String {
    let mut hasher = Sha1::new();
    hasher.update(namespace.as_bytes());
    hasher.update(b".");
    hasher.update(pod_name.as_bytes());
    let digest = hasher.finalize();
    let mut name = String::with_capacity(prefix.len() + 11);
    name.push_str(prefix);
    for byte in digest.iter() {
        // Writing into a String cannot fail.
        let _ = write!(name, "{byte:02x}");
    }
    name.truncate(prefix.len() + 11);
    name
}

/// The interface name Kubernetes runtimes ask for; the only one the Go CNI names by pod alone.
pub const DEFAULT_IFNAME: &str = "eth0";

/// The host veth name of the attachment `(container_id, ifname)` of pod
/// `pod_namespace/pod_name` (either may be empty when the runtime did not say).
///
/// - Pod name known, `ifname` is `eth0`: `veth_name(prefix, namespace, pod)`, i.e. prefix +
///   11 hex chars of SHA-1("<namespace>.<pod>"), exactly as the Go AWS VPC CNI and Calico
///   name it, so node tooling, habits and `ip link` output carry over.
/// - Pod name known, another `ifname` (a second attachment of the same pod, e.g. through
///   Multus): the pod part becomes `"<pod>.<ifname>"`, in the spirit of the Go CNI's
///   `"<pod>.<i>"` for extra interfaces. Without it both attachments would get the same name
///   and wiring the second would delete the first one's veth as "stale".
/// - Pod name or namespace unknown (non-Kubernetes callers: cnitool sends no `CNI_ARGS`,
///   podman 4 sends `K8S_POD_NAME=<container name>` without a namespace):
///   SHA-1("<container id>.<ifname>"). Hashing a constant instead would give every such
///   container the same veth name, and each ADD would tear down the previous container's
///   link; a container name is unique only within one podman store, but the container id is
///   unique per sandbox, so these names never collide.
pub fn host_veth_name(
    prefix: &str,
    pod_namespace: &str,
    pod_name: &str,
    container_id: &str,
    ifname: &str,
) -> String {
    if pod_name.is_empty() || pod_namespace.is_empty() {
        return veth_name(prefix, container_id, ifname);
    }
    if ifname == DEFAULT_IFNAME {
        veth_name(prefix, pod_namespace, pod_name)
    } else {
        veth_name(prefix, pod_namespace, &format!("{pod_name}.{ifname}"))
    }
}

/// A random locally administered unicast MAC address.
///
/// Not checked against the node's links: with 46 random bits a clash is far less likely than
/// any other failure, and listing every link on each ADD would cost time per pod.
pub fn random_mac() -> Result<[u8; 6]> {
    let mut mac = [0u8; 6];
    getrandom::fill(&mut mac).map_err(|e| NetlinkError::Random(e.to_string()))?;
    // Locally administered (bit 1 set), unicast (bit 0 clear).
    mac[0] = (mac[0] | 0x02) & !0x01;
    Ok(mac)
}

/// `aa:bb:cc:dd:ee:ff`, lower case, as `ip` prints it and IMDS lists ENIs.
pub fn format_mac(mac: &[u8; 6]) -> String {
    let [a, b, c, d, e, f] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}

/// Parses `aa:bb:cc:dd:ee:ff` (either case).
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in mac.iter_mut() {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Checks an interface name as the kernel would, so a bad name fails before anything is
/// created.
pub fn validate_ifname(what: &'static str, name: &str) -> Result<()> {
    let why = if name.is_empty() {
        Some("empty".to_string())
    } else if name.len() > IFNAME_MAX {
        Some(format!(
            "{name:?} is {} bytes, the kernel allows at most {IFNAME_MAX}",
            name.len()
        ))
    } else if name == "." || name == ".." {
        Some(format!("{name:?} is reserved"))
    } else if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        Some(format!(
            "{name:?} contains '/', ':' or whitespace, which the kernel rejects"
        ))
    } else {
        None
    };
    match why {
        Some(why) => Err(NetlinkError::Invalid { what, why }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn veth_name_matches_sha1_of_namespace_dot_pod() {
        // `printf default.nginx | sha1sum` = c440f455693b69cdd48a37aa5ecd78038f50413d
        assert_eq!(veth_name("eni", "default", "nginx"), "enic440f455693");
        assert_eq!(veth_name("", "default", "nginx"), "c440f455693");
    }

    #[test]
    fn veth_name_depends_on_both_parts_and_the_dot() {
        // "a.b" + "c" and "a" + "b.c" hash the same string: that is the Go scheme too.
        assert_eq!(veth_name("eni", "a.b", "c"), veth_name("eni", "a", "b.c"));
        assert_ne!(
            veth_name("eni", "ns1", "pod"),
            veth_name("eni", "ns2", "pod")
        );
        assert_eq!(veth_name("vlan", "kube-system", "coredns-1").len(), 15);
    }

    #[test]
    fn random_mac_is_local_unicast() {
        for _ in 0..200 {
            let mac = random_mac().unwrap();
            assert_eq!(mac[0] & 0x02, 0x02, "{}", format_mac(&mac));
            assert_eq!(mac[0] & 0x01, 0x00, "{}", format_mac(&mac));
        }
    }

    #[test]
    fn mac_text_round_trip() {
        let mac = [0x0a, 0x1b, 0x2c, 0xd3, 0xe4, 0xff];
        assert_eq!(format_mac(&mac), "0a:1b:2c:d3:e4:ff");
        assert_eq!(parse_mac("0A:1b:2c:D3:e4:ff"), Some(mac));
        assert_eq!(parse_mac("0a:1b:2c:d3:e4"), None);
        assert_eq!(parse_mac("0a:1b:2c:d3:e4:ff:00"), None);
        assert_eq!(parse_mac("0a:1b:2c:d3:e4:fg"), None);
        assert_eq!(parse_mac("a:1b:2c:d3:e4:ff"), None);
    }

    #[test]
    fn ifname_validation() {
        assert!(validate_ifname("x", "eth0").is_ok());
        assert!(validate_ifname("x", "enic440f455693").is_ok());
        assert!(validate_ifname("x", "").is_err());
        assert!(validate_ifname("x", "a234567890123456").is_err());
        assert!(validate_ifname("x", "a/b").is_err());
        assert!(validate_ifname("x", "a b").is_err());
        assert!(validate_ifname("x", "..").is_err());
    }
}
