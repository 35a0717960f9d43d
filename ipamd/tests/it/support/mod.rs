use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cloud::{Action, CloudError, InstanceLimits, NetworkInterface, NodeIdentity};
use introspect::Metrics;
use ipam_proto::{
    AddRequest, Allocation, AttachmentKey, DelReason, DelRequest, PodMeta, Reply, Request,
};
use ipamd::config::Config;
use ipamd::host::{HostError, HostNetwork, IdleVeth, NodeNet};
use ipamd::{Daemon, Parts};
use ipnetwork::{Ipv4Network, Ipv6Network};
use netops::EniSpec;
use pool::{Clock, Timestamp};
use store::SledStore;
use vpc_sim::inproc::{Account, NodeEc2, NodeImds, Options};
use vpc_sim::model::{self, EniChange, Model, SubnetSpec, Tags, Topology};

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

/// The node's EC2: vpc-sim's model in process, holding one VPC (10.0.0.0/16) with the node's
/// subnet (10.0.0.0/24) and the node launched into it, its primary ENI in a security group of
/// its own; the node's client of it (what the daemon is given, and what `Deref` calls); and
/// the ids the model generated for the node. Every call is logged; EC2 answers at once.
pub struct Cloud {
    client: NodeEc2,
    /// The instance.
    pub instance: String,
    /// Its primary ENI (device 0).
    pub primary: String,
    /// The node's subnet.
    pub subnet: String,
    /// The VPC.
    pub vpc: String,
}

impl Cloud {
    /// The node launched as `instance_type`, with `extra_types` known to EC2 besides its table.
    pub fn launch(instance_type: &str, extra_types: &[(&str, InstanceLimits)]) -> Cloud {
        let topology = Topology {
            vpc_cidr: "10.0.0.0/16".parse().unwrap(),
            secondary_cidrs: vec![],
            region: "us-west-2".into(),
            subnets: vec![SubnetSpec::new("10.0.0.0/24".parse().unwrap())],
            security_groups: vec!["node".into()],
            ipv6: false,
            vpc_ipv6_cidr: None,
            nodes: 1,
            instance_type: instance_type.into(),
            extra_types: extra_types
                .iter()
                .map(|(name, limits)| (name.to_string(), *limits))
                .collect(),
        };
        let model = Model::build(&topology, vpc_sim::rand::Rng::seeded(1), 0).unwrap();
        let account = Account::new(model, Options::instant());
        let (instance, primary, subnet, vpc) = account.with_model(|m| {
            let group = m
                .security_groups()
                .find(|g| g.name == "node")
                .map(|g| g.id.clone())
                .unwrap();
            let i = m.instances()[0].clone();
            m.modify_eni(&i.primary_eni, EniChange::SecurityGroups(vec![group]))
                .unwrap();
            (i.id, i.primary_eni, i.subnet_id, m.vpc().id.clone())
        });
        Cloud {
            client: NodeEc2::new(&account),
            instance,
            primary,
            subnet,
            vpc,
        }
    }

    /// The account behind the client: scripted failures, lost answers, the model itself.
    pub fn account(&self) -> &Arc<Account> {
        self.client.account()
    }

    /// The instance's IMDS, which follows the model.
    pub fn imds(&self) -> NodeImds {
        NodeImds::new(self.account(), &self.instance)
    }

    /// Every ENI EC2 holds, by id.
    pub fn enis(&self) -> Vec<NetworkInterface> {
        self.account().network_interfaces()
    }

    /// The ENI as EC2 holds it now.
    pub fn eni(&self, id: &str) -> Option<NetworkInterface> {
        self.account().network_interface(id)
    }

    /// Every EC2 call made, as `Action(arg)`, in order.
    pub fn calls(&self) -> Vec<String> {
        self.account().calls()
    }

    /// Makes the next call(s) of `action` fail with these errors, one per call.
    pub fn fail_next(&self, action: Action, errors: Vec<CloudError>) {
        self.account().fail_next(action, errors);
    }

    /// Associates another IPv4 CIDR with the VPC (subnets for pods, as custom networking uses).
    pub fn add_vpc_cidr(&self, cidr: &str) {
        self.account()
            .with_model(|m| m.add_vpc_cidr(cidr.parse().unwrap()))
            .unwrap();
    }

    /// Adds a subnet of the VPC in the node's AZ; returns its id.
    pub fn add_subnet(&self, cidr: &str, tags: &[(&str, &str)]) -> String {
        let cidr: Ipv4Network = cidr.parse().unwrap();
        self.account()
            .with_model(|m| m.add_subnet(cidr, None, tags_of(tags)))
            .unwrap()
    }

    /// Creates a security group; returns its id.
    pub fn add_security_group(&self, name: &str) -> String {
        let vpc = self.vpc.clone();
        self.account()
            .with_model(|m| m.create_security_group(name, name, &vpc, Tags::new()))
            .unwrap()
            .id
    }

    /// Gives the VPC an IPv6 /56 and the node's subnet `subnet` (a /64 of it), after the
    /// launch: the primary ENI has no IPv6 address, but /80s of the subnet can be delegated.
    pub fn enable_ipv6(&self, subnet: &str) {
        let subnet: Ipv6Network = subnet.parse().unwrap();
        let around = Ipv6Network::new(subnet.network(), model::VPC_V6_LEN).unwrap();
        let vpc = Ipv6Network::new(around.network(), model::VPC_V6_LEN).unwrap();
        self.account()
            .with_model(|m| {
                m.add_vpc_ipv6_cidr(Some(vpc))?;
                m.associate_subnet_ipv6_cidr(&self.subnet, Some(subnet))
            })
            .unwrap();
    }

    /// An ENI in the node's subnet made behind the node's back (no EC2 call logged): with
    /// `primary_ip` and `secondary_ips`, and attached at `device` when one is given.
    pub fn add_eni(&self, eni: AddEni<'_>) -> String {
        let now = u64::try_from(self.account().elapsed().as_millis()).unwrap();
        self.account()
            .with_model(|m| {
                let id = m
                    .create_eni(
                        model::CreateEni {
                            subnet_id: self.subnet.clone(),
                            description: eni.description.into(),
                            primary_ip: Some(eni.primary_ip),
                            tags: tags_of(eni.tags),
                            ..model::CreateEni::default()
                        },
                        now,
                    )?
                    .id;
                if !eni.secondary_ips.is_empty() {
                    let ips = model::AssignRequest::Addresses(eni.secondary_ips.to_vec());
                    m.assign_private_ips(&id, ips, now)?;
                }
                if let Some((device, delete_on_termination)) = eni.attach {
                    let attachment = m.attach_eni(&id, &self.instance, device, 0, now)?;
                    let change = EniChange::DeleteOnTermination {
                        attachment_id: attachment,
                        value: delete_on_termination,
                    };
                    m.modify_eni(&id, change)?;
                }
                Ok::<_, model::ModelError>(id)
            })
            .unwrap()
    }
}

impl std::ops::Deref for Cloud {
    type Target = NodeEc2;
    fn deref(&self) -> &NodeEc2 {
        &self.client
    }
}

/// What [`Cloud::add_eni`] makes.
pub struct AddEni<'a> {
    pub description: &'a str,
    pub primary_ip: Ipv4Addr,
    pub secondary_ips: &'a [Ipv4Addr],
    pub tags: &'a [(&'a str, &'a str)],
    /// Device index and DeleteOnTermination, for an attached ENI.
    pub attach: Option<(u32, bool)>,
}

fn tags_of(tags: &[(&str, &str)]) -> Tags {
    tags.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The node launched as `instance_type` (t3.medium: 3 ENIs x 6 IPv4; t3.nano: 2 x 2).
pub fn ec2(instance_type: &str) -> Cloud {
    Cloud::launch(instance_type, &[])
}

/// One node under test: its state directory, EC2 with the node launched as a t3.medium (3 ENIs
/// x 6 IPv4) in 10.0.0.0/24, a clock the test moves, and a recording host.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub ec2: Cloud,
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
            ec2: ec2("t3.medium"),
            clock: ManualClock::at(ms),
            host: Arc::new(RecordingHost::default()),
            cluster: tokio::sync::watch::Sender::new(no_cluster()),
        }
    }

    /// The daemon on this node, with `env`.
    pub async fn start(&self, env: &[(&str, &str)]) -> TestDaemon {
        start_seen(
            self.dir.path(),
            &self.ec2,
            &self.clock,
            &self.host,
            env,
            self.cluster.subscribe(),
            Some(self.events_tx.clone()),
        )
        .await
        .expect("the daemon starts")
    }

    /// The Events recorded so far.
    pub fn events(&self) -> Vec<cluster::ClusterEvent> {
        let mut rx = self.events.lock().unwrap();
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }
}

/// The one ENI besides the primary that EC2 knows.
pub fn secondary(ec2: &Cloud) -> NetworkInterface {
    ec2.enis()
        .into_iter()
        .find(|e| e.id != ec2.primary)
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

pub type TestDaemon = Daemon<NodeEc2, NodeImds, Arc<RecordingHost>, SledStore>;

pub async fn start(dir: &Path, ec2: &Cloud, clock: &Arc<ManualClock>) -> TestDaemon {
    try_start(dir, ec2, clock).await.unwrap()
}

pub async fn try_start(
    dir: &Path,
    ec2: &Cloud,
    clock: &Arc<ManualClock>,
) -> Result<TestDaemon, ipamd::StartupError> {
    start_with(dir, ec2, clock, &Arc::new(RecordingHost::default()), &[]).await
}

/// The view of a daemon with no Kubernetes cluster to talk to.
pub fn no_cluster() -> cluster::ClusterView {
    cluster::ClusterView::not_configured("no API server in daemon tests")
}

pub async fn start_with(
    dir: &Path,
    ec2: &Cloud,
    clock: &Arc<ManualClock>,
    host: &Arc<RecordingHost>,
    env: &[(&str, &str)],
) -> Result<TestDaemon, ipamd::StartupError> {
    let (_, cluster) = tokio::sync::watch::channel(no_cluster());
    start_seen(dir, ec2, clock, host, env, cluster, None).await
}

/// [`start_with`] with the cluster as `cluster` shows it, Events going to `events`; who the
/// node is comes from its IMDS, as in production.
pub async fn start_seen(
    dir: &Path,
    ec2: &Cloud,
    clock: &Arc<ManualClock>,
    host: &Arc<RecordingHost>,
    env: &[(&str, &str)],
    cluster: tokio::sync::watch::Receiver<cluster::ClusterView>,
    events: Option<tokio::sync::mpsc::Sender<cluster::ClusterEvent>>,
) -> Result<TestDaemon, ipamd::StartupError> {
    let identity = cloud::node_identity(&ec2.imds()).await.unwrap();
    start_as(dir, ec2, clock, identity, host, env, cluster, events).await
}

/// A daemon whose IMDS claims the instance is `instance_type`, whatever EC2 launched it as:
/// how a type neither the table nor EC2 knows is met.
pub async fn try_start_claiming(
    dir: &Path,
    ec2: &Cloud,
    clock: &Arc<ManualClock>,
    instance_type: &str,
) -> Result<TestDaemon, ipamd::StartupError> {
    let identity = NodeIdentity {
        instance_type: instance_type.into(),
        ..cloud::node_identity(&ec2.imds()).await.unwrap()
    };
    let (_, cluster) = tokio::sync::watch::channel(no_cluster());
    let host = Arc::new(RecordingHost::default());
    start_as(dir, ec2, clock, identity, &host, &[], cluster, None).await
}

#[allow(clippy::too_many_arguments)]
async fn start_as(
    dir: &Path,
    ec2: &Cloud,
    clock: &Arc<ManualClock>,
    identity: NodeIdentity,
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
            ec2: NodeEc2::clone(ec2),
            imds: ec2.imds(),
            host: Arc::clone(host),
            store,
            clock: Arc::clone(clock) as Arc<dyn Clock>,
            identity,
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
