//! What ipamd writes to the cluster: Events (on a pod, on its own pod, on its Node) and a few
//! fields of its own Node.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;

use crate::ClusterError;

/// The object an Event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Regarding {
    /// A pod.
    Pod {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its uid (`kubectl describe` lists only the events that carry it).
        uid: String,
    },
    /// A node.
    Node {
        /// Its name.
        name: String,
    },
}

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Nothing to act on.
    Normal,
    /// Something an operator should look at.
    Warning,
}

/// One Event. Repeats of the same (object, reason, action) become one Event with a count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterEvent {
    /// What it is about.
    pub regarding: Regarding,
    /// Normal or Warning.
    pub kind: EventKind,
    /// Why, in PascalCase (`FailedAssignIP`).
    pub reason: String,
    /// What failed or happened, in PascalCase: one Event per distinct action.
    pub action: String,
    /// The message.
    pub note: String,
}

/// A change to the node's own object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodePatch {
    /// Set (`Some`) or remove (`None`) annotations.
    Annotations(BTreeMap<String, Option<String>>),
    /// Remove the taint with `key`, found at `index` of `spec.taints`; the API server refuses
    /// the change if the taint has moved since, so another writer's change is never undone.
    RemoveTaint {
        /// The taint's key.
        key: String,
        /// Where it was.
        index: usize,
    },
    /// Set `status.capacity.pods` and `status.allocatable.pods`.
    MaxPods(u32),
}

/// What ipamd writes.
pub trait ClusterWrite: Send + Sync + 'static {
    /// Records `event` (or counts it again, when it repeats).
    fn publish(&self, event: ClusterEvent) -> BoxFuture<'static, Result<(), ClusterError>>;

    /// Changes the node named `node`.
    fn patch_node(
        &self,
        node: &str,
        patch: NodePatch,
    ) -> BoxFuture<'static, Result<(), ClusterError>>;
}
