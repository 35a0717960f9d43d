//! [`Cluster`] on kube-rs: watches (list, then watch, re-listing after a broken watch, with
//! kube-rs's backoff), turned into whole snapshots.

use std::collections::BTreeMap;

use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{BoxStream, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::{
    Cluster, ClusterError, ClusterEvent, ClusterWrite, EniConfigSpec, EniConfigs, EventKind,
    NodeFacts, NodePatch, PodFacts, Regarding,
};

/// The field manager named on ipamd's writes.
const FIELD_MANAGER: &str = "vpc-cni";

/// The Kubernetes API through kube-rs: in-cluster configuration from the service account, else
/// `KUBECONFIG` (or `~/.kube/config`), as kube-rs infers it.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    recorder: Recorder,
}

impl KubeCluster {
    /// A client from the inferred configuration; its Events name `instance` (ipamd's pod, or
    /// its node) as the reporting instance. Fails when there is none: ipamd then runs
    /// without a cluster, unless a feature needs one.
    pub async fn connect(instance: String) -> Result<Self, ClusterError> {
        let error = |message: String| ClusterError {
            what: "configuring the Kubernetes client".into(),
            message,
        };
        let config = kube::Config::infer()
            .await
            .map_err(|e| error(e.to_string()))?;
        let client = Client::try_from(config).map_err(|e| error(e.to_string()))?;
        let reporter = Reporter {
            controller: "vpc-cni".into(),
            instance: Some(instance),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        Ok(KubeCluster { client, recorder })
    }
}

/// The ENIConfig resource, read as untyped objects: ipamd needs two fields of its spec.
fn eni_config_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("crd.k8s.amazonaws.com", "v1alpha1", "ENIConfig"),
        "eniconfigs",
    )
}

fn node_facts(node: &Node) -> NodeFacts {
    NodeFacts {
        name: node.name_any(),
        labels: node.labels().clone(),
        annotations: node.annotations().clone(),
        unschedulable: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        taints: node
            .spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .map(|t| t.key.clone())
            .collect(),
        max_pods: node
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref()?.get("pods"))
            .and_then(|q| q.0.parse().ok()),
    }
}

fn pod_facts(pod: &Pod) -> PodFacts {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    PodFacts {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        host_network: pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false),
        finished: matches!(phase, Some("Succeeded" | "Failed"))
            || pod.metadata.deletion_timestamp.is_some(),
    }
}

fn error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ClusterError {
    let what = what.into();
    move |e| ClusterError {
        what,
        message: e.to_string(),
    }
}

/// Whether the API server answered 404: the resource type does not exist (a CRD that is not
/// installed).
fn not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 404,
        watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

/// Turns a watcher's events into whole snapshots of the watched objects by namespace and
/// name: one after
/// the initial list and one after every change. Errors pass through (the watcher retries),
/// a 404 as `missing` says.
fn snapshots<K, T>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    what: String,
    missing: &'static str,
    snapshot: impl Fn(&BTreeMap<(String, String), K>) -> T + Send + 'static,
) -> BoxStream<'static, Result<T, ClusterError>>
where
    K: ResourceExt + Send + 'static,
    T: Send + 'static,
{
    let key = |obj: &K| (obj.namespace().unwrap_or_default(), obj.name_any());
    let mut objects: BTreeMap<(String, String), K> = BTreeMap::new();
    let mut listing: BTreeMap<(String, String), K> = BTreeMap::new();
    events
        .filter_map(move |event| {
            let out = match event {
                Ok(Event::Init) => {
                    listing.clear();
                    None
                }
                Ok(Event::InitApply(obj)) => {
                    listing.insert(key(&obj), obj);
                    None
                }
                Ok(Event::InitDone) => {
                    objects = std::mem::take(&mut listing);
                    Some(Ok(snapshot(&objects)))
                }
                Ok(Event::Apply(obj)) => {
                    objects.insert(key(&obj), obj);
                    Some(Ok(snapshot(&objects)))
                }
                Ok(Event::Delete(obj)) => {
                    objects.remove(&key(&obj));
                    Some(Ok(snapshot(&objects)))
                }
                Err(e) => Some(Err(ClusterError {
                    what: what.clone(),
                    message: if not_found(&e) {
                        missing.to_string()
                    } else {
                        e.to_string()
                    },
                })),
            };
            std::future::ready(out)
        })
        .boxed()
}

impl Cluster for KubeCluster {
    fn node(&self, name: &str) -> BoxStream<'static, Result<Option<NodeFacts>, ClusterError>> {
        let api: Api<Node> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        snapshots(
            watcher(api, config).default_backoff(),
            format!("watching node {name}"),
            "the API server has no Node resource",
            |nodes| nodes.values().next().map(node_facts),
        )
    }

    fn eni_configs(&self) -> BoxStream<'static, Result<EniConfigs, ClusterError>> {
        let resource = eni_config_resource();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        snapshots(
            watcher(api, watcher::Config::default()).default_backoff(),
            "watching ENIConfigs".into(),
            "the ENIConfig CRD (eniconfigs.crd.k8s.amazonaws.com) is not installed: apply config/kubernetes/eniconfig-crd.yaml",
            |objects| {
                objects
                    .values()
                    .map(|obj| {
                        (
                            obj.name_any(),
                            EniConfigSpec::from_json(obj.data.get("spec")),
                        )
                    })
                    .collect()
            },
        )
    }

    fn pods(&self, node: &str) -> BoxStream<'static, Result<Vec<PodFacts>, ClusterError>> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        snapshots(
            watcher(api, config).default_backoff(),
            format!("watching the pods of node {node}"),
            "the API server has no Pod resource",
            |pods| pods.values().map(pod_facts).collect(),
        )
    }
}

fn reference(regarding: &Regarding) -> ObjectReference {
    match regarding {
        Regarding::Pod {
            namespace,
            name,
            uid,
        } => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(namespace.clone()),
            name: Some(name.clone()),
            uid: (!uid.is_empty()).then(|| uid.clone()),
            ..Default::default()
        },
        // The kubelet's convention: a node's Events carry its name as uid. events.k8s.io
        // wants the regarded object in the Event's own namespace, `default` for a node.
        Regarding::Node { name } => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            namespace: Some("default".into()),
            name: Some(name.clone()),
            uid: Some(name.clone()),
            ..Default::default()
        },
    }
}

impl ClusterWrite for KubeCluster {
    fn publish(&self, event: ClusterEvent) -> BoxFuture<'static, Result<(), ClusterError>> {
        let recorder = self.recorder.clone();
        async move {
            let what = format!("recording event {} on {:?}", event.reason, event.regarding);
            let ev = KubeEvent {
                type_: match event.kind {
                    EventKind::Normal => EventType::Normal,
                    EventKind::Warning => EventType::Warning,
                },
                reason: event.reason,
                note: Some(event.note),
                action: event.action,
                secondary: None,
            };
            recorder
                .publish(&ev, &reference(&event.regarding))
                .await
                .map_err(error(what))
        }
        .boxed()
    }

    fn patch_node(
        &self,
        node: &str,
        patch: NodePatch,
    ) -> BoxFuture<'static, Result<(), ClusterError>> {
        let api: Api<Node> = Api::all(self.client.clone());
        let node = node.to_string();
        async move {
            let params = PatchParams::apply(FIELD_MANAGER);
            let what = format!("patching node {node} ({patch:?})");
            let result = match &patch {
                NodePatch::Annotations(set) => {
                    let body = json!({"metadata": {"annotations": set}});
                    api.patch(&node, &params, &Patch::Merge(&body)).await
                }
                NodePatch::RemoveTaint { key, index } => {
                    let ops = json!([
                        {"op": "test", "path": format!("/spec/taints/{index}/key"), "value": key},
                        {"op": "remove", "path": format!("/spec/taints/{index}")},
                    ]);
                    let ops: json_patch::Patch =
                        serde_json::from_value(ops).map_err(|e| ClusterError {
                            what: what.clone(),
                            message: e.to_string(),
                        })?;
                    api.patch(&node, &params, &Patch::<()>::Json(ops)).await
                }
                NodePatch::MaxPods(n) => {
                    let pods = n.to_string();
                    let body = json!({"status": {
                        "capacity": {"pods": pods},
                        "allocatable": {"pods": pods},
                    }});
                    api.patch_status(&node, &params, &Patch::Merge(&body)).await
                }
            };
            result.map(drop).map_err(error(what))
        }
        .boxed()
    }
}
