//! Our side: the real ipamd daemon (`ipamd::Daemon`, the planner of the `pool` crate, the
//! client-side EC2 rate limit of `cloud::throttle`) on a simulated node, its background tasks
//! started through the entry ipamd's main uses, the cluster view carrying the pods bound to the
//! node (predictive growth).

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use cloud::throttle::{ThrottlePolicy, Throttled};
use cluster::{
    ApiState, ClusterView, EniConfigKeys, EniConfigSpec, EniConfigs, NodeFacts, PodFacts,
};
use introspect::Metrics;
use ipam_proto::{
    AddRequest, AttachmentKey, DelReason, DelRequest, NoAddressCause, PodMeta, Reply, Request,
};
use ipamd::config::Config;
use ipamd::daemon::{LostState, PersistError, Tasks};
use ipamd::{Daemon, Parts};
use pool::{Clock, MemoryStore, Timestamp};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::host::SimHost;
use crate::node::{AddOutcome, Cni};
use vpc_sim::inproc::{Account, NodeEc2, NodeImds};

type SimDaemon = Daemon<Throttled<NodeEc2>, NodeImds, SimHost, MemoryStore>;

/// The pool's clock: the account's (simulated) time, from a fixed epoch.
struct SimClock(Arc<Account>);

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        Timestamp(u64::try_from((crate::EPOCH + self.0.elapsed()).as_millis()).unwrap_or(0))
    }
}

/// ipamd on one node.
pub struct Ours {
    daemon: Arc<SimDaemon>,
    view: watch::Sender<ClusterView>,
    running: JoinHandle<Result<(), PersistError>>,
}

fn key(name: &str) -> AttachmentKey {
    AttachmentKey {
        network: "aws-cni".into(),
        container_id: format!("sandbox-{name}"),
        ifname: "eth0".into(),
    }
}

fn meta(name: &str) -> PodMeta {
    PodMeta {
        namespace: "default".into(),
        name: name.into(),
        infra_container_id: format!("sandbox-{name}"),
        uid: format!("uid-{name}"),
    }
}

impl Ours {
    /// Starts ipamd on `instance` with `env` over ipamd's defaults (no leaked-ENI cleanup: the
    /// fleet leaks nothing), with every background task ipamd's main runs (`seed` spreads the
    /// periodic checks). With `eni_config` (a name and its spec) the cluster holds that
    /// ENIConfig and the node names it with the label `ENI_CONFIG_LABEL_DEF` defaults to,
    /// which is what custom networking reads.
    pub async fn start(
        account: &Arc<Account>,
        instance: &str,
        env: &[(String, String)],
        eni_config: Option<(String, EniConfigSpec)>,
        seed: u64,
    ) -> anyhow::Result<Ours> {
        let mut vars: HashMap<String, String> = [
            ("IPAMD_STATE_DIR", "/nonexistent/fleet/state"),
            (
                "AWS_VPC_K8S_CNI_BACKING_STORE",
                "/nonexistent/fleet/ipam.json",
            ),
            ("AWS_VPC_K8S_CNI_LOG_FILE", "stderr"),
            ("DISABLE_LEAKED_ENI_CLEANUP", "true"),
            ("MY_NODE_NAME", instance),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        vars.extend(env.iter().cloned());
        let config = Config::from_env(|k| vars.get(k).cloned()).context("the node's settings")?;
        let imds = NodeImds::new(account, instance);
        let identity = cloud::node_identity(&imds).await.context("IMDS")?;
        let ec2 = Throttled::new(NodeEc2::new(account), ThrottlePolicy::default())
            .context("the client-side rate limits")?;
        let labels = eni_config
            .iter()
            .map(|(name, _)| (EniConfigKeys::default().label, name.clone()))
            .collect();
        let eni_configs = eni_config.map(|(name, spec)| EniConfigs::from([(name, Ok(spec))]));
        let (view, seen) = watch::channel(ClusterView {
            api: ApiState::Connected,
            node_name: Some(instance.to_string()),
            node: Some(NodeFacts {
                name: instance.to_string(),
                labels,
                ..Default::default()
            }),
            eni_configs,
            eni_configs_error: None,
            pods: Some(Vec::new()),
        });
        let daemon = Daemon::start(
            &config,
            Parts {
                ec2,
                imds,
                host: SimHost,
                store: Arc::new(MemoryStore::default()),
                clock: Arc::new(SimClock(Arc::clone(account))),
                identity,
                metrics: Arc::new(Metrics::new("fleet").context("metrics")?),
                lost: LostState::default(),
                cluster: seen,
                events: None,
            },
        )
        .await
        .context("ipamd's start")?;
        let daemon = Arc::new(daemon);
        // Every task ipamd's main runs, through the same entry; until the node is dropped.
        let mut rng = vpc_sim::rand::Rng::seeded(seed);
        let running = tokio::spawn(Arc::clone(&daemon).run(
            Tasks::from_config(&config),
            move || rng.unit(),
            std::future::pending(),
        ));
        Ok(Ours {
            daemon,
            view,
            running,
        })
    }
}

impl Drop for Ours {
    fn drop(&mut self) {
        // Dropping the daemon's run stops every task it started.
        self.running.abort();
    }
}

impl Cni for Ours {
    fn bound(&self, name: &str) {
        self.view.send_modify(|v| {
            v.pods.get_or_insert_with(Vec::new).push(PodFacts {
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                ..Default::default()
            });
        });
    }

    async fn add(&self, name: &str) -> AddOutcome {
        let request = Request::Add(AddRequest {
            key: key(name),
            pod: meta(name),
            netns: format!("/var/run/netns/{name}"),
        });
        match self.daemon.handle(request).await {
            Ok(reply) => AddOutcome::Placed(match reply {
                Reply::Add(add) => add.allocation.ip,
                _ => None,
            }),
            Err(e) => AddOutcome::Failed {
                throttled: e.cause == Some(NoAddressCause::Ec2Throttling),
            },
        }
    }

    async fn del(&self, name: &str) {
        let request = Request::Del(DelRequest {
            key: key(name),
            pod: meta(name),
            reason: DelReason::PodDeleted,
        });
        // A DEL of a pod the node holds always succeeds; its result changes nothing here.
        let _ = self.daemon.handle(request).await;
        self.view.send_modify(|v| {
            if let Some(pods) = &mut v.pods {
                pods.retain(|p| p.name != name);
            }
        });
    }

    fn idle(&self) -> u32 {
        let view = self.daemon.view();
        let c = view.pool.counts(view.now);
        c.total - c.assigned
    }
}
