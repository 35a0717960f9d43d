#![allow(dead_code)]

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cloud::fake::FakeEc2;
use cloud::{EniMetadata, NetworkInterface, NodeIdentity};
use ipam_proto::{AttachmentKey, PodMeta};
use ipamd::Daemon;
use ipamd::config::Config;
use pool::{Clock, Timestamp};
use store::SledStore;

pub const ENI: &str = "eni-0primary";

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

pub fn config(state_dir: &Path) -> Config {
    let vars: HashMap<&str, String> = [
        ("IPAMD_STATE_DIR", state_dir.display().to_string()),
        (
            "IPAMD_SOCKET",
            state_dir.join("ipamd.sock").display().to_string(),
        ),
        ("AWS_VPC_K8S_CNI_LOG_FILE", "stderr".to_string()),
    ]
    .into();
    Config::from_env(|k| vars.get(k).cloned()).unwrap()
}

pub fn identity(instance_type: &str) -> NodeIdentity {
    NodeIdentity {
        instance_id: "i-0123456789abcdef0".into(),
        instance_type: instance_type.into(),
        region: "us-west-2".into(),
        availability_zone: "us-west-2a".into(),
        primary_ip: Ipv4Addr::new(10, 0, 0, 10),
        vpc_id: "vpc-1".into(),
        vpc_cidrs: vec!["10.0.0.0/16".parse().unwrap()],
        primary_eni: EniMetadata {
            mac: "02:00:00:00:00:01".into(),
            eni_id: ENI.into(),
            device_number: 0,
            subnet_id: "subnet-1".into(),
            subnet_cidr: "10.0.0.0/24".parse().unwrap(),
            local_ipv4s: vec![Ipv4Addr::new(10, 0, 0, 10)],
        },
    }
}

/// EC2 knowing the node's primary ENI in a /24 (or the given subnet), ENIs capped at `ipv4_per_eni`.
pub fn ec2(ipv4_per_eni: u32, subnet: &str) -> Arc<FakeEc2> {
    let ec2 = FakeEc2::default();
    ec2.set_ipv4_per_eni(ipv4_per_eni);
    ec2.add_eni(
        NetworkInterface {
            id: ENI.into(),
            subnet_id: "subnet-1".into(),
            primary_ip: Some(Ipv4Addr::new(10, 0, 0, 10)),
            status: "in-use".into(),
            ..Default::default()
        },
        subnet.parse().unwrap(),
    );
    Arc::new(ec2)
}

pub type TestDaemon = Daemon<Arc<FakeEc2>, SledStore>;

pub async fn start(dir: &Path, ec2: &Arc<FakeEc2>, clock: &Arc<ManualClock>) -> TestDaemon {
    try_start(dir, ec2, clock, "t3.medium").await.unwrap()
}

pub async fn try_start(
    dir: &Path,
    ec2: &Arc<FakeEc2>,
    clock: &Arc<ManualClock>,
    instance_type: &str,
) -> Result<TestDaemon, ipamd::StartupError> {
    let store = Arc::new(SledStore::open(&dir.join("state")).unwrap());
    Daemon::start(
        &config(&dir.join("state")),
        Arc::clone(ec2),
        identity(instance_type),
        store,
        Arc::clone(clock) as Arc<dyn Clock>,
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
