//! skel's guard against a runtime pointing `CNI_NETNS` at the plugin's own namespace, where
//! "wiring the pod" would move the node's routes and links around.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cni::CniError;

/// The namespace the plugin process runs in.
const OWN_NETNS: &str = "/proc/self/ns/net";

/// True when `a` and `b` are the same file (same device and inode), which for nsfs files
/// means the same namespace. A path that cannot be read is not the same.
fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Code 8 when `netns` is the plugin's own network namespace and `CNI_NETNS_OVERRIDE` was not
/// set.
pub fn refuse_own_netns(netns: &str, overridden: bool) -> Result<(), CniError> {
    if overridden || !same_file(Path::new(netns), Path::new(OWN_NETNS)) {
        return Ok(());
    }
    Err(CniError::invalid_netns(format!(
        "CNI_NETNS {netns} is the plugin's own network namespace: refusing to wire a pod there \
         (set CNI_NETNS_OVERRIDE=1 if this is intended)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_namespace_is_refused_unless_overridden() {
        let err = refuse_own_netns(OWN_NETNS, false).unwrap_err();
        assert_eq!(err.code, 8);
        assert!(err.msg.contains(OWN_NETNS), "{}", err.msg);
        assert!(refuse_own_netns(OWN_NETNS, true).is_ok());
        // The thread-self link names the same namespace through another path.
        assert_eq!(
            refuse_own_netns("/proc/thread-self/ns/net", false)
                .unwrap_err()
                .code,
            8
        );
    }

    #[test]
    fn other_paths_are_fine() {
        assert!(refuse_own_netns("/nonexistent/netns", false).is_ok());
        // Another nsfs file of the same process, but not a network namespace.
        assert!(refuse_own_netns("/proc/self/ns/mnt", false).is_ok());
    }
}
