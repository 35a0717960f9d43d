//! What ipamd tells the cluster: its Events, and on its own Node the real pod capacity
//! (annotation `vpc-cni.io/max-pods`, and the kubelet's max pods when the operator opts in)
//! and the removal of the startup taint once pods can be given addresses.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cloud::{Ec2, Imds};
use cluster::{ClusterEvent, ClusterWrite, NodeFacts, NodePatch};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::Daemon;
use crate::durability::DaemonStore;
use crate::host::HostNetwork;

/// The annotation carrying how many pods the node can give an address to.
pub const MAX_PODS_ANNOTATION: &str = "vpc-cni.io/max-pods";

/// The startup taint ipamd removes once the node can address pods (the operator, or the
/// autoscaler, puts it on new nodes).
pub const STARTUP_TAINT: &str = "vpc-cni.io/agent-not-ready";

/// Events waiting to be recorded at most; beyond that (the API server is away) new ones are
/// dropped rather than held.
pub const EVENT_QUEUE: usize = 256;

/// How often the node is looked at when nothing changes (the pool fills without the node
/// changing).
const NODE_PERIOD: Duration = Duration::from_secs(2);

/// How long to wait after the API server refused a change to the node (RBAC, say), so a
/// fleet of nodes does not retry a refused patch every [`NODE_PERIOD`].
const NODE_RETRY: Duration = Duration::from_secs(30);

/// What the node should show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desired {
    /// Pods the node can address, when ipamd knows (`None` in IPv6 mode).
    pub capacity: Option<u32>,
    /// Addresses a pod could be given now.
    pub free: u32,
    /// STARTUP_TAINT_MIN_IPS.
    pub min_free: u32,
    /// PUBLISH_NODE_MAX_PODS.
    pub publish_max_pods: bool,
}

/// The changes that bring `node` to what it should show.
pub fn node_patches(node: &NodeFacts, d: &Desired) -> Vec<NodePatch> {
    let mut patches = Vec::new();
    let shown = node.annotations.get(MAX_PODS_ANNOTATION).cloned();
    let wanted = d.capacity.map(|c| c.to_string());
    if shown != wanted {
        patches.push(NodePatch::Annotations(BTreeMap::from([(
            MAX_PODS_ANNOTATION.to_string(),
            wanted,
        )])));
    }
    if let Some(index) = node.taints.iter().position(|k| k == STARTUP_TAINT)
        && d.free >= d.min_free.max(1)
    {
        patches.push(NodePatch::RemoveTaint {
            key: STARTUP_TAINT.to_string(),
            index,
        });
    }
    if d.publish_max_pods
        && let Some(c) = d.capacity
        && node.max_pods != Some(c)
    {
        patches.push(NodePatch::MaxPods(c));
    }
    patches
}

/// Records the daemon's Events, one after another, until the daemon is gone.
pub async fn record_events<W: ClusterWrite + ?Sized>(
    writer: Arc<W>,
    mut events: mpsc::Receiver<ClusterEvent>,
) {
    let mut last_error = None;
    while let Some(event) = events.recv().await {
        match writer.publish(event).await {
            Ok(()) => last_error = None,
            Err(e) => {
                let text = e.to_string();
                if last_error.as_ref() != Some(&text) {
                    warn!(error = %text, "an Event could not be recorded");
                }
                last_error = Some(text);
            }
        }
    }
}

/// Keeps the node showing what [`node_patches`] says, whenever the node or the pool changes.
pub async fn publish_node<W, E, I, H, S>(
    writer: Arc<W>,
    daemon: Arc<Daemon<E, I, H, S>>,
    min_free: u32,
    publish_max_pods: bool,
) where
    W: ClusterWrite + ?Sized,
    E: Ec2,
    I: Imds,
    H: HostNetwork,
    S: DaemonStore,
{
    let mut view = daemon.cluster_view();
    let mut last_error = None;
    loop {
        let mut refused = false;
        let node = view.borrow_and_update().node.clone();
        if let Some(node) = node {
            let desired = Desired {
                capacity: daemon.capacity(),
                free: daemon.free_addresses(),
                min_free,
                publish_max_pods,
            };
            for patch in node_patches(&node, &desired) {
                let done = writer.patch_node(&node.name, patch.clone()).await;
                match done {
                    Ok(()) => {
                        last_error = None;
                        match &patch {
                            NodePatch::RemoveTaint { key, .. } => info!(
                                taint = %key, free = desired.free,
                                "removed the startup taint: ipamd serves and holds free addresses"
                            ),
                            other => info!(patch = ?other, "updated the node"),
                        }
                    }
                    Err(e) => {
                        let text = e.to_string();
                        if last_error.as_ref() != Some(&text) {
                            warn!(error = %text, "could not update the node; retrying in {}s", NODE_RETRY.as_secs());
                        }
                        last_error = Some(text);
                        refused = true;
                    }
                }
            }
        }
        if refused {
            tokio::time::sleep(NODE_RETRY).await;
            continue;
        }
        tokio::select! {
            changed = view.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(NODE_PERIOD) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(annotation: Option<&str>, taints: &[&str], max_pods: Option<u32>) -> NodeFacts {
        NodeFacts {
            name: "n".into(),
            annotations: annotation
                .map(|v| (MAX_PODS_ANNOTATION.to_string(), v.to_string()))
                .into_iter()
                .collect(),
            taints: taints.iter().map(|t| t.to_string()).collect(),
            max_pods,
            ..Default::default()
        }
    }

    fn desired(capacity: u32, free: u32) -> Desired {
        Desired {
            capacity: Some(capacity),
            free,
            min_free: 2,
            publish_max_pods: false,
        }
    }

    #[test]
    fn the_capacity_annotation_is_written_when_it_differs() {
        let set = NodePatch::Annotations(BTreeMap::from([(
            MAX_PODS_ANNOTATION.to_string(),
            Some("27".to_string()),
        )]));
        assert_eq!(
            node_patches(&node(None, &[], None), &desired(27, 0)),
            std::slice::from_ref(&set)
        );
        assert_eq!(
            node_patches(&node(Some("30"), &[], None), &desired(27, 0)),
            [set]
        );
        assert!(node_patches(&node(Some("27"), &[], None), &desired(27, 0)).is_empty());
    }

    #[test]
    fn the_startup_taint_goes_only_once_enough_addresses_are_free() {
        let tainted = node(Some("27"), &["other", STARTUP_TAINT], None);
        assert!(node_patches(&tainted, &desired(27, 1)).is_empty());
        assert_eq!(
            node_patches(&tainted, &desired(27, 2)),
            [NodePatch::RemoveTaint {
                key: STARTUP_TAINT.into(),
                index: 1
            }]
        );
        let zero = Desired {
            min_free: 0,
            ..desired(27, 0)
        };
        assert!(
            node_patches(&tainted, &zero).is_empty(),
            "at least one address, always"
        );
    }

    #[test]
    fn max_pods_is_patched_only_when_the_operator_opts_in() {
        let n = node(Some("27"), &[], Some(110));
        assert!(node_patches(&n, &desired(27, 5)).is_empty());
        let opted = Desired {
            publish_max_pods: true,
            ..desired(27, 5)
        };
        assert_eq!(node_patches(&n, &opted), [NodePatch::MaxPods(27)]);
        assert!(node_patches(&node(Some("27"), &[], Some(27)), &opted).is_empty());
    }
}
