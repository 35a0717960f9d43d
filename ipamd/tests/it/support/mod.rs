use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cloud::fake::{FakeEc2, FakeImds};
use cloud::{Attachment, EniMetadata, NetworkInterface, NodeIdentity};
use introspect::Metrics;
use ipam_proto::{
    AddRequest, Allocation, AttachmentKey, DelReason, DelRequest, PodMeta, Reply, Request,
};
use ipamd::config::Config;
use ipamd::host::{HostError, HostNetwork, IdleVeth, NodeNet};
use ipamd::{Daemon, Parts};
use netops::EniSpec;
use pool::{Clock, Timestamp};
use store::SledStore;

pub const ENI: &str = "eni-0primary";
pub const INSTANCE: &str = "i-0123456789abcdef0";

/// A clock the test moves by hand.
#[derive(Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn at(ms: u64) -> Arc<Self> {
        Arc::new(ManualClock(AtomicU64::new(ms)))
    }
    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

pub fn config(state_dir: &Path, env: &[(&str, &str)]) -> Config {
    let mut vars: HashMap<&str, String> = [
        ("IPAMD_STATE_DIR", state_dir.display().to_string()),
        (
            "IPAMD_SOCKET",
            state_dir.join("ipamd.sock").display().to_string(),
        ),
        ("AWS_VPC_K8S_CNI_LOG_FILE", "stderr".to_string()),
        // Never the machine's own aws-node checkpoint.
        (
            "AWS_VPC_K8S_CNI_BACKING_STORE",
            state_dir.join("aws-node-ipam.json").display().to_string(),
        ),
        // No controller runs in these tests unless one is started: do not wait long for it.
        ("IPAMD_ADD_WAIT", "100".to_string()),
    ]
    .into();
    vars.extend(env.iter().map(|(k, v)| (*k, v.to_string())));
    Config::from_env(|k| vars.get(k).cloned()).unwrap()
}

pub fn identity(instance_type: &str) -> NodeIdentity {
    NodeIdentity {
        instance_id: INSTANCE.into(),
        instance_type: instance_type.into(),
        region: "us-west-2".into(),
        availability_zone: "us-west-2a".into(),
        primary_ip: Ipv4Addr::new(10, 0, 0, 10),
        primary_ipv6: None,
        vpc_id: "vpc-1".into(),
        vpc_cidrs: vec!["10.0.0.0/16".parse().unwrap()],
        primary_eni: EniMetadata {
            mac: "02:00:00:00:00:01".into(),
            eni_id: ENI.into(),
            device_number: 0,
            subnet_id: "subnet-1".into(),
            subnet_cidr: "10.0.0.0/24".parse().unwrap(),
            local_ipv4s: vec![Ipv4Addr::new(10, 0, 0, 10)],
            ipv6s: Vec::new(),
            ipv6_prefixes: Vec::new(),
        },
    }
}

/// EC2 knowing the node's primary ENI (attached at device 0) in `subnet`; every ENI is
/// capped at `ipv4_per_eni` addresses and the instance at `max_enis`.
pub fn ec2_with(ipv4_per_eni: u32, max_enis: u32, subnet: &str) -> Arc<FakeEc2> {
    let ec2 = FakeEc2::default();
    ec2.set_ipv4_per_eni(ipv4_per_eni);
    ec2.set_max_enis(max_enis);
    ec2.add_eni(
        NetworkInterface {
            id: ENI.into(),
            mac: "02:00:00:00:00:01".into(),
            subnet_id: "subnet-1".into(),
            primary_ip: Some(Ipv4Addr::new(10, 0, 0, 10)),
            status: "in-use".into(),
            security_groups: vec!["sg-node".into()],
            attachment: Some(Attachment {
                id: "eni-attach-primary".into(),
                instance_id: Some(INSTANCE.into()),
                device_index: 0,
                network_card_index: 0,
                delete_on_termination: true,
            }),
            ..Default::default()
        },
        subnet.parse().unwrap(),
    );
    Arc::new(ec2)
}

/// t3.medium-like EC2: 6 IPv4 per ENI, 3 ENIs.
pub fn ec2(ipv4_per_eni: u32, subnet: &str) -> Arc<FakeEc2> {
    ec2_with(ipv4_per_eni, 3, subnet)
}

/// One node under test: its state directory, EC2 knowing its primary ENI (6 IPv4 per ENI, 3
/// ENIs, in 10.0.0.0/24), a clock the test moves, and a recording host.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub ec2: Arc<FakeEc2>,
    pub clock: Arc<ManualClock>,
    pub host: Arc<RecordingHost>,
    /// The cluster as the daemon sees it: a test sends views (there is no API server).
    pub cluster: tokio::sync::watch::Sender<cluster::ClusterView>,
    /// The Events the daemon records.
    pub events: std::sync::Mutex<tokio::sync::mpsc::Receiver<cluster::ClusterEvent>>,
    events_tx: tokio::sync::mpsc::Sender<cluster::ClusterEvent>,
}

impl Node {
    /// The node with its clock at `ms`.
    pub fn at(ms: u64) -> Node {
        let (events_tx, events) = tokio::sync::mpsc::channel(64);
        Node {
            events: std::sync::Mutex::new(events),
            events_tx,
            dir: tempfile::tempdir().expect("a state dir"),
            ec2: ec2(6, "10.0.0.0/24"),
            clock: ManualClock::at(ms),
            host: Arc::new(RecordingHost::default()),
            cluster: tokio::sync::watch::Sender::new(no_cluster()),
        }
    }

    /// A t3.medium's daemon on this node, with `env`.
    pub async fn start(&self, env: &[(&str, &str)]) -> TestDaemon {
        self.try_start("t3.medium", env)
            .await
            .expect("the daemon starts")
    }

    /// A daemon of `instance_type` on this node, with `env`.
    pub async fn try_start(
        &self,
        instance_type: &str,
        env: &[(&str, &str)],
    ) -> Result<TestDaemon, ipamd::StartupError> {
        start_seen(
            self.dir.path(),
            &self.ec2,
            &self.clock,
            instance_type,
            &self.host,
            env,
            self.cluster.subscribe(),
            Some(self.events_tx.clone()),
        )
        .await
    }

    /// The Events recorded so far.
    pub fn events(&self) -> Vec<cluster::ClusterEvent> {
        let mut rx = self.events.lock().unwrap();
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }
}

/// The one ENI besides the primary that EC2 knows.
pub fn secondary(ec2: &FakeEc2) -> NetworkInterface {
    ec2.enis()
        .into_iter()
        .find(|e| e.id != ENI)
        .expect("a second ENI")
}

/// The node's network, recorded. `missing_links` makes that many ENI setups find no link yet.
#[derive(Default)]
pub struct RecordingHost {
    calls: Mutex<Vec<String>>,
    pub missing_links: AtomicU32,
    /// Addresses no pod on the node routes to any more (their pods are gone).
    pub gone: Mutex<std::collections::BTreeSet<IpAddr>>,
    /// The pod routes on the node: address and veth.
    pub routes: Mutex<Vec<(IpAddr, String)>>,
    /// The host veths that carry no pod route; deleting one removes it.
    pub idle: Mutex<Vec<IdleVeth>>,
}

impl RecordingHost {
    /// Puts a veth without a pod route on the node.
    pub fn leave_veth(&self, index: u32, name: &str) {
        self.idle.lock().unwrap().push(IdleVeth {
            index,
            name: name.into(),
        });
    }

    /// The links the daemon deleted.
    pub fn deleted_links(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.starts_with("delete link"))
            .collect()
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

impl HostNetwork for RecordingHost {
    async fn setup_node(&self, net: &NodeNet) -> Result<Vec<String>, HostError> {
        self.record(format!("node {} mtu {}", net.snat.primary_ip, net.mtu));
        Ok(vec![])
    }

    async fn setup_eni(&self, spec: &EniSpec) -> Result<Vec<String>, HostError> {
        let missing = self
            .missing_links
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if missing {
            return Err(HostError::LinkNotFound(netops::format_mac(&spec.mac)));
        }
        self.record(format!(
            "setup eni device {} ip {} table {} subnet {}",
            spec.device_number,
            spec.primary_ip,
            netops::eni_table(spec.device_number),
            spec.subnet
        ));
        Ok(vec![])
    }

    async fn teardown_eni(
        &self,
        device: u32,
        ip: Ipv4Addr,
        keep_table: bool,
    ) -> Result<Vec<String>, HostError> {
        let table = if keep_table { " keeping table" } else { "" };
        self.record(format!("teardown eni device {device} ip {ip}{table}"));
        Ok(vec![])
    }

    async fn unrouted(&self, ips: Vec<IpAddr>) -> Result<Vec<IpAddr>, HostError> {
        let gone = self.gone.lock().unwrap();
        Ok(ips.into_iter().filter(|ip| gone.contains(ip)).collect())
    }

    async fn pod_routes(&self, veth_prefix: &str) -> Result<Vec<(IpAddr, String)>, HostError> {
        let routes = self.routes.lock().unwrap();
        Ok(routes
            .iter()
            .filter(|(_, link)| link.starts_with(veth_prefix))
            .cloned()
            .collect())
    }

    async fn idle_veths(&self, veth_prefix: &str) -> Result<Vec<IdleVeth>, HostError> {
        let idle = self.idle.lock().unwrap();
        Ok(idle
            .iter()
            .filter(|v| v.name.starts_with(veth_prefix))
            .cloned()
            .collect())
    }

    async fn delete_link(&self, index: u32) -> Result<bool, HostError> {
        self.record(format!("delete link #{index}"));
        let mut idle = self.idle.lock().unwrap();
        let before = idle.len();
        idle.retain(|v| v.index != index);
        Ok(idle.len() < before)
    }
}

pub type TestDaemon = Daemon<Arc<FakeEc2>, FakeImds, Arc<RecordingHost>, SledStore>;

pub async fn start(dir: &Path, ec2: &Arc<FakeEc2>, clock: &Arc<ManualClock>) -> TestDaemon {
    try_start(dir, ec2, clock, "t3.medium").await.unwrap()
}

pub async fn try_start(
    dir: &Path,
    ec2: &Arc<FakeEc2>,
    clock: &Arc<ManualClock>,
    instance_type: &str,
) -> Result<TestDaemon, ipamd::StartupError> {
    start_with(
        dir,
        ec2,
        clock,
        instance_type,
        &Arc::new(RecordingHost::default()),
        &[],
    )
    .await
}

/// The view of a daemon with no Kubernetes cluster to talk to.
pub fn no_cluster() -> cluster::ClusterView {
    cluster::ClusterView::not_configured("no API server in daemon tests")
}

pub async fn start_with(
    dir: &Path,
    ec2: &Arc<FakeEc2>,
    clock: &Arc<ManualClock>,
    instance_type: &str,
    host: &Arc<RecordingHost>,
    env: &[(&str, &str)],
) -> Result<TestDaemon, ipamd::StartupError> {
    let (_, cluster) = tokio::sync::watch::channel(no_cluster());
    start_seen(dir, ec2, clock, instance_type, host, env, cluster, None).await
}

/// [`start_with`] with the cluster as `cluster` shows it, Events going to `events`.
#[allow(clippy::too_many_arguments)]
pub async fn start_seen(
    dir: &Path,
    ec2: &Arc<FakeEc2>,
    clock: &Arc<ManualClock>,
    instance_type: &str,
    host: &Arc<RecordingHost>,
    env: &[(&str, &str)],
    cluster: tokio::sync::watch::Receiver<cluster::ClusterView>,
    events: Option<tokio::sync::mpsc::Sender<cluster::ClusterEvent>>,
) -> Result<TestDaemon, ipamd::StartupError> {
    let (store, lost) = ipamd::state::open_state(&dir.join("state"), clock.now()).unwrap();
    let store = Arc::new(store);
    Daemon::start(
        &config(&dir.join("state"), env),
        Parts {
            ec2: Arc::clone(ec2),
            imds: FakeImds::default(),
            host: Arc::clone(host),
            store,
            clock: Arc::clone(clock) as Arc<dyn Clock>,
            identity: identity(instance_type),
            metrics: Arc::new(Metrics::new("test").unwrap()),
            lost,
            cluster,
            events,
        },
    )
    .await
}

pub fn key(n: u32) -> AttachmentKey {
    AttachmentKey {
        network: "aws-cni".into(),
        container_id: format!("container{n}"),
        ifname: "eth0".into(),
    }
}

pub fn pod(n: u32) -> PodMeta {
    PodMeta {
        namespace: "default".into(),
        name: format!("pod{n}"),
        ..Default::default()
    }
}

pub fn add(n: u32) -> Request {
    Request::Add(AddRequest {
        key: key(n),
        pod: pod(n),
        netns: format!("/run/netns/pod{n}"),
    })
}

pub fn del(n: u32) -> Request {
    Request::Del(DelRequest {
        key: key(n),
        pod: pod(n),
        reason: DelReason::PodDeleted,
    })
}

/// The address `d` gives pod `n`, which must get one.
pub async fn allocate(d: &TestDaemon, n: u32) -> Allocation {
    match d.handle(add(n)).await.unwrap() {
        Reply::Add(r) => r.allocation,
        other => panic!("{other:?}"),
    }
}

/// [`key`] as the pool names it.
pub fn pool_key(n: u32) -> pool::AttachmentKey {
    let k = key(n);
    pool::AttachmentKey {
        network: k.network,
        container_id: k.container_id,
        ifname: k.ifname,
    }
}

/// The IPv4 address `d` gives pod `n`, which must get one.
pub async fn ipv4_of(d: &TestDaemon, n: u32) -> Ipv4Addr {
    allocate(d, n).await.ip.expect("an IPv4 address")
}
