//! [`Cluster`] on kube-rs: watches (list, then watch, re-listing after a broken watch, with
//! kube-rs's backoff), turned into whole snapshots.

use std::collections::BTreeMap;

use futures_util::stream::{BoxStream, Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, ResourceExt};

use crate::{Cluster, ClusterError, EniConfigSpec, EniConfigs, NodeFacts};

/// The Kubernetes API through kube-rs: in-cluster configuration from the service account, else
/// `KUBECONFIG` (or `~/.kube/config`), as kube-rs infers it.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
}

impl KubeCluster {
    /// A client from the inferred configuration. Fails when there is none: ipamd then runs
    /// without a cluster, unless a feature needs one.
    pub async fn connect() -> Result<Self, ClusterError> {
        let error = |message: String| ClusterError {
            what: "configuring the Kubernetes client".into(),
            message,
        };
        let config = kube::Config::infer()
            .await
            .map_err(|e| error(e.to_string()))?;
        let client = Client::try_from(config).map_err(|e| error(e.to_string()))?;
        Ok(KubeCluster { client })
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

/// Turns a watcher's events into whole snapshots of the watched objects by name: one after
/// the initial list and one after every change. Errors pass through (the watcher retries),
/// a 404 as `missing` says.
fn snapshots<K, T>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    what: String,
    missing: &'static str,
    snapshot: impl Fn(&BTreeMap<String, K>) -> T + Send + 'static,
) -> BoxStream<'static, Result<T, ClusterError>>
where
    K: ResourceExt + Send + 'static,
    T: Send + 'static,
{
    let mut objects: BTreeMap<String, K> = BTreeMap::new();
    let mut listing: BTreeMap<String, K> = BTreeMap::new();
    events
        .filter_map(move |event| {
            let out = match event {
                Ok(Event::Init) => {
                    listing.clear();
                    None
                }
                Ok(Event::InitApply(obj)) => {
                    listing.insert(obj.name_any(), obj);
                    None
                }
                Ok(Event::InitDone) => {
                    objects = std::mem::take(&mut listing);
                    Some(Ok(snapshot(&objects)))
                }
                Ok(Event::Apply(obj)) => {
                    objects.insert(obj.name_any(), obj);
                    Some(Ok(snapshot(&objects)))
                }
                Ok(Event::Delete(obj)) => {
                    objects.remove(&obj.name_any());
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
                    .iter()
                    .map(|(name, obj)| {
                        (name.clone(), EniConfigSpec::from_json(obj.data.get("spec")))
                    })
                    .collect()
            },
        )
    }
}
