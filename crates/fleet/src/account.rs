//! One AWS account's EC2 as the fleet sees it: vpc-sim's model of the VPC behind every call,
//! EC2's account-wide request buckets (one per API, refused with `RequestLimitExceeded` when
//! empty, as EC2 documents), a latency per call, and IMDS showing each instance's view a
//! little behind EC2. Every node gets a handle ([`NodeEc2`], [`NodeImds`]) that implements
//! the same traits ipamd's real clients do.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cloud::{
    Attachment, CloudError, CreateEni, Ec2, EniFilter, Imds, InstanceLimits, NetworkInterface,
    Subnet,
};
use ipnetwork::{Ipv4Network, Ipv6Network};
use tokio::time::Instant;
use vpc_sim::model::{AssignRequest, EniChange, Model, ModelError};

/// EC2's account-wide request buckets: (burst, refill per second) of each Describe* API and of
/// each mutating API (the figures `cloud::throttle` stays well under).
pub const DESCRIBE_BUCKET: (u32, f64) = (100, 20.0);
/// See [`DESCRIBE_BUCKET`].
pub const MUTATE_BUCKET: (u32, f64) = (200, 5.0);

/// How long EC2 takes to answer, by API: tens of milliseconds to assign addresses, seconds to
/// attach an ENI (the attachment is usable only once it completes).
pub fn latency(api: &str) -> Duration {
    Duration::from_millis(match api {
        "AttachNetworkInterface" => 2_000,
        "CreateNetworkInterface" => 300,
        "DetachNetworkInterface" | "DeleteNetworkInterface" => 500,
        "AssignPrivateIpAddresses" | "UnassignPrivateIpAddresses" => 50,
        "AssignIpv4Prefixes" | "UnassignIpv4Prefixes" => 50,
        _ => 100,
    })
}

/// How far each instance's IMDS lags EC2.
pub const IMDS_LAG: Duration = Duration::from_secs(2);

/// What EC2 answered over the run.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Requests by API, throttled ones included.
    pub calls: BTreeMap<String, u64>,
    /// Requests refused with `RequestLimitExceeded`.
    pub throttled: u64,
}

impl Tally {
    /// Every request.
    pub fn total(&self) -> u64 {
        self.calls.values().sum()
    }
}

struct Inner {
    model: Model,
    buckets: HashMap<&'static str, cloud::throttle::TokenBucket>,
    /// EC2 refuses every call until then (a throttling storm caused elsewhere in the account).
    storm: Option<(Duration, Duration)>,
    tally: Tally,
}

/// The account.
pub struct Account {
    inner: Mutex<Inner>,
    start: Instant,
}

fn bucket(api: &'static str) -> cloud::throttle::TokenBucket {
    let (burst, rate) = if api.starts_with("Describe") {
        DESCRIBE_BUCKET
    } else {
        MUTATE_BUCKET
    };
    // A server bucket queues nobody: without a token the call is refused.
    cloud::throttle::TokenBucket::new(api, burst, rate, 0)
        .unwrap_or_else(|e| unreachable!("the documented buckets are valid: {e}"))
}

fn model_error(api: &str, e: &ModelError) -> CloudError {
    CloudError::from_code(api, e.code(), e.to_string())
}

impl Account {
    /// An account holding `model`, its clock starting now.
    pub fn new(model: Model) -> Arc<Account> {
        Arc::new(Account {
            inner: Mutex::new(Inner {
                model,
                buckets: HashMap::new(),
                storm: None,
                tally: Tally::default(),
            }),
            start: Instant::now(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Time since the account was made.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// EC2 refuses every call between `from` and `until` (times since the start).
    pub fn storm(&self, from: Duration, until: Duration) {
        self.lock().storm = Some((from, until));
    }

    /// What EC2 answered so far.
    pub fn tally(&self) -> Tally {
        self.lock().tally.clone()
    }

    /// Runs `f` on the model as EC2 serving `api`: after its latency, if a token is left.
    async fn call<T>(
        &self,
        api: &'static str,
        f: impl FnOnce(&mut Model, u64) -> Result<T, ModelError>,
    ) -> Result<T, CloudError> {
        tokio::time::sleep(latency(api)).await;
        let now = self.elapsed();
        let now_ms = self.now_ms();
        let mut inner = self.lock();
        *inner.tally.calls.entry(api.to_string()).or_default() += 1;
        let storming = inner
            .storm
            .is_some_and(|(from, until)| from <= now && now < until);
        let token = inner
            .buckets
            .entry(api)
            .or_insert_with(|| bucket(api))
            .take(now);
        if storming || token.is_none() {
            inner.tally.throttled += 1;
            return Err(CloudError::from_code(
                api,
                "RequestLimitExceeded",
                "Request limit exceeded.",
            ));
        }
        f(&mut inner.model, now_ms).map_err(|e| model_error(api, &e))
    }

    /// Reads the model (setting up a scenario, reporting), outside EC2's accounting.
    pub fn with_model<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        f(&mut self.lock().model)
    }

    /// IMDS of `instance` at `path`, as the instance sees it now.
    fn imds(&self, instance: &str, path: &str) -> Option<String> {
        let now_ms = self.now_ms();
        let lag = u64::try_from(IMDS_LAG.as_millis()).unwrap_or(0);
        let view = self.lock().model.imds_view(instance, now_ms, lag)?;
        vpc_sim::imds::tree::resolve(&view, path, now_ms)
    }
}

fn interface(model: &Model, eni: &vpc_sim::model::Eni) -> NetworkInterface {
    NetworkInterface {
        id: eni.id.clone(),
        mac: eni.mac.clone(),
        subnet_id: eni.subnet_id.clone(),
        vpc_id: model.vpc().id.clone(),
        description: eni.description.clone(),
        status: eni.status.as_str().to_string(),
        primary_ip: Some(eni.primary_ip),
        secondary_ips: eni.secondary_ips.iter().map(|s| s.value).collect(),
        prefixes: eni.prefixes.iter().map(|s| s.value).collect(),
        ipv6_addresses: Vec::new(),
        ipv6_prefixes: Vec::new(),
        attachment: eni.attachment.as_ref().map(|a| Attachment {
            id: a.id.clone(),
            instance_id: Some(a.instance_id.clone()),
            device_index: a.device_index,
            network_card_index: a.network_card_index,
            delete_on_termination: a.delete_on_termination,
        }),
        security_groups: eni.security_groups.clone(),
        tags: eni.tags.clone(),
    }
}

fn subnet(model: &Model, s: &vpc_sim::model::Subnet) -> Subnet {
    Subnet {
        id: s.id.clone(),
        cidr: s.cidr,
        ipv6_cidr: None,
        availability_zone: s.az.clone(),
        vpc_id: model.vpc().id.clone(),
        available_ips: s.available_ip_address_count(),
        tags: s.tags.clone(),
    }
}

/// Whether `s` passes DescribeSubnets' filters (those ipamd sends).
fn matches(s: &Subnet, filters: &[EniFilter]) -> bool {
    filters.iter().all(|f| {
        let value = match f.name.as_str() {
            "vpc-id" => &s.vpc_id,
            "availability-zone" => &s.availability_zone,
            "subnet-id" => &s.id,
            _ => return true,
        };
        f.values.iter().any(|v| v == value)
    })
}

/// One node's EC2 client.
#[derive(Clone)]
pub struct NodeEc2 {
    account: Arc<Account>,
}

impl NodeEc2 {
    /// A client of `account`.
    pub fn new(account: &Arc<Account>) -> Self {
        NodeEc2 {
            account: Arc::clone(account),
        }
    }
}

impl NodeEc2 {
    /// DescribeInstances, as the Go CNI calls it before attaching an ENI: the device indexes
    /// the instance's ENIs hold.
    pub async fn describe_instance(&self, instance_id: &str) -> Result<Vec<u32>, CloudError> {
        self.account
            .call("DescribeInstances", |m, _| {
                m.instance(instance_id)?;
                Ok(m.enis_of(instance_id)
                    .iter()
                    .filter_map(|e| e.attachment.as_ref().map(|a| a.device_index))
                    .collect())
            })
            .await
    }
}

fn unsupported(api: &str) -> CloudError {
    CloudError::from_code(api, "UnsupportedOperation", "not simulated by the fleet")
}

impl Ec2 for NodeEc2 {
    async fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError> {
        self.account
            .call("DescribeInstanceTypes", |m, _| m.limits(instance_type))
            .await
    }

    async fn describe_network_interfaces(
        &self,
        ids: &[String],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.account
            .call("DescribeNetworkInterfaces", |m, _| {
                ids.iter()
                    .map(|id| m.eni(id).map(|e| interface(m, e)))
                    .collect()
            })
            .await
    }

    async fn assign_private_ips(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Addr>, CloudError> {
        self.account
            .call("AssignPrivateIpAddresses", |m, now| {
                m.assign_private_ips(eni_id, AssignRequest::Count(count), now)
                    .map(|a| a.ips)
            })
            .await
    }

    async fn unassign_private_ips(&self, eni_id: &str, ips: &[Ipv4Addr]) -> Result<(), CloudError> {
        self.account
            .call("UnassignPrivateIpAddresses", |m, _| {
                m.unassign_private_ips(eni_id, ips, &[])
            })
            .await
    }

    async fn describe_instance_enis(
        &self,
        instance_id: &str,
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.account
            .call("DescribeNetworkInterfaces", |m, _| {
                Ok(m.enis_of(instance_id)
                    .into_iter()
                    .map(|e| interface(m, e))
                    .collect())
            })
            .await
    }

    async fn create_network_interface(
        &self,
        request: &CreateEni,
    ) -> Result<NetworkInterface, CloudError> {
        let req = vpc_sim::model::CreateEni {
            subnet_id: request.subnet_id.clone(),
            description: request.description.clone(),
            security_groups: request.security_groups.clone(),
            primary_ip: None,
            secondary_count: request.secondary_ips,
            prefix_count: request.ipv4_prefixes,
            ipv6_address_count: None,
            tags: request.tags.clone(),
            client_token: Some(request.client_token.clone()).filter(|t| !t.is_empty()),
        };
        self.account
            .call("CreateNetworkInterface", |m, now| {
                m.create_eni(req, now).map(|e| interface(m, &e))
            })
            .await
    }

    async fn attach_network_interface(
        &self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
    ) -> Result<String, CloudError> {
        self.account
            .call("AttachNetworkInterface", |m, now| {
                m.attach_eni(eni_id, instance_id, device_index, 0, now)
            })
            .await
    }

    async fn set_delete_on_termination(
        &self,
        eni_id: &str,
        attachment_id: &str,
    ) -> Result<(), CloudError> {
        self.account
            .call("ModifyNetworkInterfaceAttribute", |m, _| {
                m.modify_eni(
                    eni_id,
                    EniChange::DeleteOnTermination {
                        attachment_id: attachment_id.to_string(),
                        value: true,
                    },
                )
            })
            .await
    }

    async fn detach_network_interface(&self, attachment_id: &str) -> Result<(), CloudError> {
        self.account
            .call("DetachNetworkInterface", |m, _| {
                m.detach_eni(attachment_id, false).map(drop)
            })
            .await
    }

    async fn delete_network_interface(&self, eni_id: &str) -> Result<(), CloudError> {
        self.account
            .call("DeleteNetworkInterface", |m, _| m.delete_eni(eni_id))
            .await
    }

    async fn assign_ipv4_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Network>, CloudError> {
        self.account
            .call("AssignIpv4Prefixes", |m, now| {
                m.assign_private_ips(eni_id, AssignRequest::PrefixCount(count), now)
                    .map(|a| a.prefixes)
            })
            .await
    }

    async fn unassign_ipv4_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv4Network],
    ) -> Result<(), CloudError> {
        self.account
            .call("UnassignIpv4Prefixes", |m, _| {
                m.unassign_private_ips(eni_id, &[], prefixes)
            })
            .await
    }

    async fn assign_ipv6_prefixes(&self, _: &str, _: u32) -> Result<Vec<Ipv6Network>, CloudError> {
        Err(unsupported("AssignIpv6Prefixes"))
    }

    async fn unassign_ipv6_prefixes(&self, _: &str, _: &[Ipv6Network]) -> Result<(), CloudError> {
        Err(unsupported("UnassignIpv6Prefixes"))
    }

    async fn find_network_interfaces(
        &self,
        _: &[EniFilter],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        // Only the leaked-ENI cleanup asks this, and the fleet's nodes leak nothing.
        Err(unsupported("DescribeNetworkInterfaces (filtered)"))
    }

    async fn create_tags(&self, _: &str, _: &BTreeMap<String, String>) -> Result<(), CloudError> {
        self.account.call("CreateTags", |_, _| Ok(())).await
    }

    async fn describe_subnets(&self, filters: &[EniFilter]) -> Result<Vec<Subnet>, CloudError> {
        self.account
            .call("DescribeSubnets", |m, _| {
                Ok(m.subnets()
                    .into_iter()
                    .map(|s| subnet(m, s))
                    .filter(|s| matches(s, filters))
                    .collect())
            })
            .await
    }
}

/// One instance's IMDS.
#[derive(Clone)]
pub struct NodeImds {
    account: Arc<Account>,
    instance: String,
}

impl NodeImds {
    /// The IMDS of `instance` in `account`.
    pub fn new(account: &Arc<Account>, instance: &str) -> Self {
        NodeImds {
            account: Arc::clone(account),
            instance: instance.to_string(),
        }
    }
}

impl Imds for NodeImds {
    async fn get(&self, path: &str) -> Result<Option<String>, CloudError> {
        // IMDS answers in about a millisecond and is never throttled here.
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(self.account.imds(&self.instance, path))
    }
}
