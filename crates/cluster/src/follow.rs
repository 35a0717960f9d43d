//! Keeping a [`ClusterView`] up to date from a [`Cluster`].

use std::time::SystemTime;

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::{ApiState, Cluster, ClusterError, ClusterView};

/// The API server failed a request: said once when it starts failing, and kept with the
/// time it started. Returns whether the view changed.
fn failing(view: &mut ClusterView, e: &ClusterError) -> bool {
    let since = match &view.api {
        ApiState::Failing { error, .. } if *error == e.to_string() => return false,
        ApiState::Failing { since, .. } => *since,
        _ => {
            warn!(error = %e, "the Kubernetes API server cannot be asked; going on with what ipamd knows, and retrying");
            SystemTime::now()
        }
    };
    view.api = ApiState::Failing {
        error: e.to_string(),
        since,
    };
    true
}

fn connected(view: &mut ClusterView) {
    if !matches!(view.api, ApiState::Connected) {
        info!("the Kubernetes API server answers");
    }
    view.api = ApiState::Connected;
}

/// Keeps `view` up to date: the node named `node_name` and its pods always, the ENIConfigs
/// when `eni_configs` is set. Runs until every receiver of `view` is gone. Nothing here blocks ipamd:
/// the daemon reads whatever `view` holds when it decides.
pub async fn follow<C: Cluster>(
    cluster: C,
    node_name: String,
    eni_configs: bool,
    view: watch::Sender<ClusterView>,
) {
    view.send_modify(|v| {
        v.node_name = Some(node_name.clone());
        v.api = ApiState::Connecting {
            since: SystemTime::now(),
        };
    });
    let mut node = cluster.node(&node_name);
    let mut pods = cluster.pods(&node_name);
    let mut configs: BoxStream<'static, _> = if eni_configs {
        cluster.eni_configs()
    } else {
        stream::pending().boxed()
    };
    loop {
        // Receivers hear of a change only: a watch retrying the same failure is not one.
        tokio::select! {
            item = node.next() => match item {
                Some(Ok(facts)) => _ = view.send_if_modified(|v| {
                    let before = v.clone();
                    connected(v);
                    if facts.is_none() && v.node.is_some() {
                        warn!(node = %node_name, "the node object is gone");
                    }
                    v.node = facts;
                    *v != before
                }),
                Some(Err(e)) => _ = view.send_if_modified(|v| failing(v, &e)),
                None => return,
            },
            item = pods.next() => match item {
                Some(Ok(all)) => _ = view.send_if_modified(|v| {
                    let changed = v.pods.as_ref() != Some(&all);
                    v.pods = Some(all);
                    changed
                }),
                // Pods only size growth ahead of their ADDs: without them ipamd grows as ADDs
                // come, so a failing watch is logged by the node's watch alone.
                Some(Err(e)) => tracing::debug!(error = %e, "the node's pods cannot be listed"),
                None => return,
            },
            item = configs.next() => match item {
                Some(Ok(all)) => _ = view.send_if_modified(|v| {
                    let before = v.clone();
                    v.eni_configs = Some(all);
                    v.eni_configs_error = None;
                    *v != before
                }),
                // The node's watch says whether the API server answers; this one only whether
                // the ENIConfigs can be read.
                Some(Err(e)) => _ = view.send_if_modified(|v| {
                    let error = Some(e.to_string());
                    let changed = v.eni_configs_error != error;
                    if changed {
                        warn!(error = %e, "the ENIConfigs cannot be listed");
                    }
                    v.eni_configs_error = error;
                    changed
                }),
                None => return,
            },
            () = view.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures_util::stream::Stream;
    use tokio::sync::mpsc;

    use super::*;
    use crate::{EniConfigSpec, EniConfigs, NodeFacts};

    type NodeItem = Result<Option<NodeFacts>, ClusterError>;
    type ConfigItem = Result<EniConfigs, ClusterError>;

    fn from_channel<T: Send + 'static>(rx: mpsc::UnboundedReceiver<T>) -> impl Stream<Item = T> {
        stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
    }

    /// A cluster whose streams the test feeds.
    struct Scripted {
        node: Mutex<Option<mpsc::UnboundedReceiver<NodeItem>>>,
        configs: Mutex<Option<mpsc::UnboundedReceiver<ConfigItem>>>,
        configs_asked: AtomicBool,
    }

    impl Scripted {
        fn new() -> (
            Self,
            mpsc::UnboundedSender<NodeItem>,
            mpsc::UnboundedSender<ConfigItem>,
        ) {
            let (node_tx, node_rx) = mpsc::unbounded_channel();
            let (cfg_tx, cfg_rx) = mpsc::unbounded_channel();
            let cluster = Scripted {
                node: Mutex::new(Some(node_rx)),
                configs: Mutex::new(Some(cfg_rx)),
                configs_asked: AtomicBool::new(false),
            };
            (cluster, node_tx, cfg_tx)
        }
    }

    impl Cluster for std::sync::Arc<Scripted> {
        fn node(&self, _: &str) -> BoxStream<'static, NodeItem> {
            match self.node.lock().unwrap().take() {
                Some(rx) => from_channel(rx).boxed(),
                None => stream::pending().boxed(),
            }
        }
        fn pods(&self, _: &str) -> BoxStream<'static, Result<Vec<crate::PodFacts>, ClusterError>> {
            stream::iter([Ok(vec![crate::PodFacts {
                name: "p".into(),
                ..Default::default()
            }])])
            .chain(stream::pending())
            .boxed()
        }
        fn eni_configs(&self) -> BoxStream<'static, ConfigItem> {
            self.configs_asked.store(true, Ordering::SeqCst);
            match self.configs.lock().unwrap().take() {
                Some(rx) => from_channel(rx).boxed(),
                None => stream::pending().boxed(),
            }
        }
    }

    fn node(name: &str) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn the_view_follows_the_streams_and_keeps_what_it_knew_through_failures() {
        let (cluster, node_tx, cfg_tx) = Scripted::new();
        let (tx, mut rx) = watch::channel(ClusterView::not_configured("starting"));
        let task = tokio::spawn(follow(std::sync::Arc::new(cluster), "n1".into(), true, tx));

        rx.wait_for(|v| matches!(v.api, ApiState::Connecting { .. }))
            .await
            .unwrap();
        assert_eq!(rx.borrow().node_name.as_deref(), Some("n1"));

        node_tx.send(Ok(Some(node("n1")))).unwrap();
        rx.wait_for(|v| v.node.is_some() && v.pods.is_some())
            .await
            .unwrap();
        assert_eq!(rx.borrow().api, ApiState::Connected);
        assert_eq!(
            rx.borrow().pods.as_ref().map(Vec::len),
            Some(1),
            "the node's pods are followed"
        );

        let configs: EniConfigs = BTreeMap::from([(
            "default".to_string(),
            Ok(EniConfigSpec {
                subnet: "subnet-1".into(),
                security_groups: vec![],
            }),
        )]);
        cfg_tx.send(Ok(configs.clone())).unwrap();
        rx.wait_for(|v| v.eni_configs.is_some()).await.unwrap();

        let broken = ClusterError {
            what: "watching node n1".into(),
            message: "connection refused".into(),
        };
        node_tx.send(Err(broken)).unwrap();
        let failing = rx
            .wait_for(|v| matches!(v.api, ApiState::Failing { .. }))
            .await
            .unwrap()
            .clone();
        assert_eq!(failing.node, Some(node("n1")), "what was known is kept");
        assert_eq!(failing.eni_configs, Some(configs));

        node_tx.send(Ok(None)).unwrap();
        rx.wait_for(|v| v.node.is_none()).await.unwrap();
        assert_eq!(rx.borrow().api, ApiState::Connected);

        drop(rx);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn without_custom_networking_no_eniconfig_is_read() {
        let (cluster, node_tx, _cfg_tx) = Scripted::new();
        let cluster = std::sync::Arc::new(cluster);
        let (tx, mut rx) = watch::channel(ClusterView::not_configured("starting"));
        let task = tokio::spawn(follow(
            std::sync::Arc::clone(&cluster),
            "n1".into(),
            false,
            tx,
        ));
        node_tx.send(Ok(Some(node("n1")))).unwrap();
        rx.wait_for(|v| v.node.is_some()).await.unwrap();
        assert_eq!(rx.borrow().eni_configs, None);
        assert!(!cluster.configs_asked.load(Ordering::SeqCst));
        drop(rx);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn an_unreadable_eniconfig_list_is_kept_apart_from_the_api_servers_state() {
        let (cluster, node_tx, cfg_tx) = Scripted::new();
        let (tx, mut rx) = watch::channel(ClusterView::not_configured("starting"));
        let task = tokio::spawn(follow(std::sync::Arc::new(cluster), "n1".into(), true, tx));
        node_tx.send(Ok(Some(node("n1")))).unwrap();
        rx.wait_for(|v| v.node.is_some()).await.unwrap();
        let missing = ClusterError {
            what: "watching ENIConfigs".into(),
            message: "the ENIConfig CRD is not installed".into(),
        };
        cfg_tx.send(Err(missing.clone())).unwrap();
        rx.wait_for(|v| v.eni_configs_error.is_some())
            .await
            .unwrap();
        assert_eq!(
            rx.borrow().api,
            ApiState::Connected,
            "the API server answers"
        );
        // The same failure again changes nothing, so receivers are not woken for it.
        rx.mark_unchanged();
        cfg_tx.send(Err(missing)).unwrap();
        cfg_tx.send(Ok(Default::default())).unwrap();
        rx.changed().await.unwrap();
        let v = rx.borrow_and_update().clone();
        assert_eq!(
            (v.eni_configs, v.eni_configs_error),
            (Some(Default::default()), None)
        );
        drop(rx);
        task.await.unwrap();
    }
}
