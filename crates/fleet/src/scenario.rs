//! The scenarios, and one run of a fleet through one of them: nodes launched into one
//! simulated account, each given its pods by the scheduler once its CNI is up, on the
//! simulated clock.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cluster::EniConfigSpec;
use ipnetwork::Ipv4Network;
use serde::Serialize;
use tokio::time::Instant;
use vpc_sim::Fragment;
use vpc_sim::model::{CreateEni, Model, SubnetSpec, Topology};
use vpc_sim::rand::Rng;

use crate::go_cni::{GoCni, GoOptions};
use crate::node::{Cni, PodRecord, Records, run_pod};
use crate::ours::Ours;
use vpc_sim::inproc::{Account, Options, Tally};

/// Which scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Every node launched within a minute, each given 20 to 40 pods.
    Launch,
    /// Nodes running 30 pods each, every pod replaced after a random lifetime (10 min on
    /// average), for an hour.
    Churn,
    /// 200 nodes sharing one subnet (a /17) already 95% used by others: 8 addresses left per
    /// node, for 3 to 9 pods each.
    Scarcity,
    /// A launch during which EC2 throttles every call for a minute (the account is busy).
    Throttle,
    /// 200 nodes with prefix delegation (WARM_PREFIX_TARGET=1) in one /17 where every /28
    /// block holds an address of someone else's, so EC2 refuses every prefix while single
    /// addresses are still to be had; 10 to 30 pods each. Halfway through, the strays go and
    /// prefixes can be had again.
    Fragmented,
}

/// How the nodes' pods are networked, on both sides (`--prefix-delegation`,
/// `--custom-networking`); every scenario runs either, both or neither (the fragmented one
/// always with prefix delegation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Networking {
    /// Pods get addresses from delegated /28 prefixes, `WARM_PREFIX_TARGET=1`, max pods 110.
    pub prefix_delegation: bool,
    /// Pods get addresses only on ENIs in their node's ENIConfig subnet (a subnet of its own
    /// beside the node's, in the same AZ), never on the primary ENI.
    pub custom_networking: bool,
}

/// The tag that marks a pod subnet (custom networking) and names its ENIConfig.
pub const ENI_CONFIG_TAG: &str = "fleet.vpc-cni/eniconfig";
/// The tag of a pod subnet holding the CIDR of the node subnet whose nodes it serves.
pub const NODE_SUBNET_TAG: &str = "fleet.vpc-cni/node-subnet";
/// Addresses a pod subnet holds per node at least: max pods with prefix delegation (110) in
/// /28s is 112, plus its ENIs' primaries.
const POD_SUBNET_PER_NODE: usize = 128;
/// Where the pod subnets go: VPC CIDRs associated for them, /16 after /16, from 100.64.0.0
/// (the range EKS's custom-networking guide uses).
const POD_CIDR_BASE: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 0);

/// A scenario's parameters.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Which.
    pub kind: Kind,
    /// Nodes.
    pub nodes: usize,
    /// Their instance type.
    pub instance_type: &'static str,
    /// Pods per node, drawn uniformly from this range.
    pub pods: (u32, u32),
    /// Nodes launch at random within this.
    pub launch_window: Duration,
    /// From launch to the CNI starting (the node boots).
    pub boot: Duration,
    /// A node's pods are bound at random within this after its CNI is up.
    pub bind_spread: Duration,
    /// When the run ends.
    pub horizon: Duration,
    /// Pods live this long on average (exponentially) and are replaced, when set.
    pub lifetime: Option<Duration>,
    /// Addresses per node others leave free in the nodes' subnet (scarcity): 8 per node,
    /// for 3 to 9 pods each, is 5% of the /17 at 200 nodes (95% used).
    pub free_per_node: Option<u32>,
    /// EC2 refuses every call in this window.
    pub storm: Option<(Duration, Duration)>,
    /// With prefix delegation, in a subnet where every /28 block holds someone else's
    /// address (`Fragment::All`) from the start until this time, when the strays go (at or
    /// past the horizon: never).
    pub fragmented_until: Option<Duration>,
    /// Prefix delegation and custom networking, as asked for (the fragmented scenario
    /// implies prefix delegation).
    pub networking: Networking,
}

/// Nodes in each /18 subnet of the launch, churn and throttle scenarios.
const NODES_PER_SUBNET: usize = 250;
/// Nodes in each /16 CIDR of the VPC: four /18 subnets.
const NODES_PER_CIDR: usize = 4 * NODES_PER_SUBNET;
/// The most nodes the VPC holds: EC2 associates at most five IPv4 CIDRs with a VPC by
/// default (the primary and four secondary ones), each a /16 at most.
pub const MAX_NODES: usize = 5 * NODES_PER_CIDR;

impl Scenario {
    /// The scenario `kind` with `nodes` nodes (its documented size when `None`).
    pub fn new(kind: Kind, nodes: Option<usize>) -> Scenario {
        let base = Scenario {
            kind,
            nodes: 1_000,
            instance_type: "m5.xlarge",
            pods: (20, 40),
            launch_window: Duration::from_secs(60),
            boot: Duration::from_secs(10),
            bind_spread: Duration::from_secs(20),
            horizon: Duration::from_secs(15 * 60),
            lifetime: None,
            free_per_node: None,
            storm: None,
            fragmented_until: None,
            networking: Networking::default(),
        };
        let s = match kind {
            Kind::Launch => base,
            Kind::Churn => Scenario {
                pods: (30, 30),
                horizon: Duration::from_secs(60 * 60),
                lifetime: Some(Duration::from_secs(10 * 60)),
                ..base
            },
            // Fewer pods per node than a warm ENI holds: what the warm pools keep idle is
            // what the subnet lacks.
            Kind::Scarcity => Scenario {
                nodes: 200,
                pods: (3, 9),
                free_per_node: Some(8),
                ..base
            },
            Kind::Throttle => Scenario {
                nodes: 300,
                storm: Some((Duration::from_secs(30), Duration::from_secs(90))),
                ..base
            },
            // Healed halfway: long enough that every pod has been bound and retried for
            // minutes while no prefix could be had, and then time for ipamd's prefix retry
            // (at most 5 min apart) to find the blocks free again.
            Kind::Fragmented => Scenario {
                nodes: 200,
                pods: (10, 30),
                fragmented_until: Some(base.horizon / 2),
                ..base
            },
        };
        Scenario {
            nodes: nodes.unwrap_or(s.nodes),
            ..s
        }
    }

    /// The same scenario with `networking` on both sides.
    pub fn with_networking(self, networking: Networking) -> Scenario {
        Scenario { networking, ..self }
    }

    /// Whether the nodes run with prefix delegation (WARM_PREFIX_TARGET=1): asked for, or
    /// in the fragmented scenario.
    pub fn prefix_delegation(&self) -> bool {
        self.networking.prefix_delegation || self.fragmented_until.is_some()
    }

    /// Whether pods go on ENIs in an ENIConfig's subnet (custom networking).
    pub fn custom_networking(&self) -> bool {
        self.networking.custom_networking
    }

    /// The VPC, 10.0.0.0/16: one /18 per 250 nodes, from 10.0.0.0/18 on. Up to 1,000 nodes
    /// they fit the /16; each further 1,000 take a secondary /16 CIDR (10.1.0.0/16,
    /// 10.2.0.0/16, ...), up to the four more EC2 associates with a VPC by default: at most
    /// 5,000 nodes. In the scarcity scenario one /17 that others fill but for `free_per_node`
    /// per node; in the fragmented one a /17 with a stray address in every /28 block. With
    /// custom networking, a pod subnet beside each ([`pod_subnets`]), which is then the one
    /// others fill; its CIDRs come on top of the nodes' (EC2's quota of CIDRs per VPC can be
    /// raised to 50).
    fn model(&self, seed: u64) -> anyhow::Result<Model> {
        let (prefix, subnets, cidrs) = if self.free_per_node.is_some() {
            (17, 1, 1)
        } else if self.fragmented_until.is_some() {
            // A /17 less its 2,048 strays holds 30,715 free addresses; on /32s alone an
            // m5.xlarge holds at most 4 ENIs × (14 secondaries + a primary), 60: 400 nodes
            // take at most 24,000.
            anyhow::ensure!(
                self.nodes <= 400,
                "at most 400 nodes fit the fragmented /17"
            );
            (17, 1, 1)
        } else {
            anyhow::ensure!(
                self.nodes <= MAX_NODES,
                "at most {MAX_NODES} nodes fit the VPC, not {}: 250 in each /18 subnet, four \
                 subnets in each /16 CIDR, and five CIDRs, EC2's default quota for a VPC",
                self.nodes
            );
            (
                18,
                self.nodes.div_ceil(NODES_PER_SUBNET).max(1),
                self.nodes.div_ceil(NODES_PER_CIDR).max(1),
            )
        };
        // The /16s after 10.0.0.0/16 that the subnets reach into: 10.1.0.0/16 and on.
        let mut secondary_cidrs = (1..cidrs)
            .map(|i| {
                let second = u8::try_from(i).context("too many CIDRs")?;
                Ok(Ipv4Network::new(
                    std::net::Ipv4Addr::new(10, second, 0, 0),
                    16,
                )?)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let size = 1u32 << (32 - prefix);
        let share = |i: usize| self.nodes / subnets + usize::from(i < self.nodes % subnets);
        let mut specs: Vec<SubnetSpec> = (0..subnets as u32)
            .map(|i| {
                let base = u32::from(std::net::Ipv4Addr::new(10, 0, 0, 0)) + i * size;
                let mut spec = SubnetSpec::new(Ipv4Network::new(base.into(), prefix)?);
                spec.nodes = (i > 0).then_some(share(i as usize));
                if self.fragmented_until.is_some() {
                    spec.fragment = Fragment::All;
                }
                Ok(spec)
            })
            .collect::<anyhow::Result<_>>()?;
        if self.custom_networking() {
            let shares: Vec<usize> = (0..subnets).map(share).collect();
            let (pods, cidrs) = pod_subnets(&specs, &shares)?;
            specs.extend(pods);
            secondary_cidrs.extend(cidrs);
        }
        let topology = Topology {
            vpc_cidr: "10.0.0.0/16".parse()?,
            secondary_cidrs,
            region: "us-west-2".into(),
            subnets: specs,
            nodes: self.nodes,
            instance_type: self.instance_type.into(),
            extra_types: Vec::new(),
            security_groups: Vec::new(),
            ipv6: false,
            vpc_ipv6_cidr: None,
        };
        let mut model = Model::build(&topology, Rng::seeded(seed), 0)
            .map_err(|e| anyhow::anyhow!("the fleet's VPC: {e}"))?;
        if let Some(per_node) = self.free_per_node {
            let keep = u32::try_from(self.nodes)?.saturating_mul(per_node);
            // The subnet the pods' addresses come from is the scarce one: the ENIConfig's
            // under custom networking.
            let scarce = model
                .subnets()
                .into_iter()
                .find(|s| s.tags.contains_key(ENI_CONFIG_TAG) == self.custom_networking())
                .map(|s| s.id.clone())
                .context("no subnet to fill")?;
            fill(&mut model, &scarce, keep)?;
        }
        Ok(model)
    }
}

/// Custom networking's pod subnets: one per node subnet (`shares[i]` nodes in `nodes[i]`),
/// in its AZ, as large as it or [`POD_SUBNET_PER_NODE`] addresses per node, whichever is
/// more (up to a /16), with its strays if it has them; tagged with the ENIConfig naming it
/// and the node subnet it serves. They go in VPC CIDRs of their own, /16s from
/// [`POD_CIDR_BASE`], which are returned too.
fn pod_subnets(
    nodes: &[SubnetSpec],
    shares: &[usize],
) -> anyhow::Result<(Vec<SubnetSpec>, Vec<Ipv4Network>)> {
    let base = u32::from(POD_CIDR_BASE);
    let mut next = base;
    let mut specs = Vec::new();
    for (i, (node, share)) in nodes.iter().zip(shares).enumerate() {
        let want = (share * POD_SUBNET_PER_NODE)
            .max(1 << (32 - node.cidr.prefix()))
            .next_power_of_two();
        anyhow::ensure!(
            want <= 1 << 16,
            "{share} nodes need a pod subnet larger than a /16 under custom networking"
        );
        let size = u32::try_from(want)?;
        let at = next.next_multiple_of(size);
        next = at + size;
        let mut spec = SubnetSpec::new(Ipv4Network::new(at.into(), 32 - size.ilog2() as u8)?);
        spec.az.clone_from(&node.az);
        spec.nodes = Some(0);
        spec.fragment = node.fragment;
        let name = format!("pods-{i}");
        spec.tags.insert("Name".into(), name.clone());
        spec.tags.insert(ENI_CONFIG_TAG.into(), name);
        spec.tags
            .insert(NODE_SUBNET_TAG.into(), node.cidr.to_string());
        specs.push(spec);
    }
    let cidrs = (base..next)
        .step_by(1 << 16)
        .map(|at| Ipv4Network::new(at.into(), 16))
        .collect::<Result<_, _>>()?;
    Ok((specs, cidrs))
}

/// Fills `subnet` with others' ENIs (50 addresses each) until `keep_free` addresses are
/// left.
fn fill(model: &mut Model, subnet: &str, keep_free: u32) -> anyhow::Result<()> {
    let subnet = model.subnet(subnet)?.clone();
    while model.subnet(&subnet.id)?.available_ip_address_count() > keep_free {
        let free = model.subnet(&subnet.id)?.available_ip_address_count();
        let take = (free - keep_free).clamp(1, 50);
        model
            .create_eni(
                CreateEni {
                    subnet_id: subnet.id.clone(),
                    description: "another team's workload".into(),
                    secondary_count: take - 1,
                    ..Default::default()
                },
                0,
            )
            .map_err(|e| anyhow::anyhow!("filling the subnet: {e}"))?;
    }
    Ok(())
}

/// Which algorithm runs the nodes.
#[derive(Clone, Debug)]
pub enum Algorithm {
    /// ipamd, with these settings over its defaults.
    Ours(Vec<(String, String)>),
    /// The Go CNI's algorithm, as modelled from its code, with these settings.
    GoCni(GoOptions),
}

/// What one run left.
pub struct Run {
    /// Every pod's record.
    pub pods: Vec<PodRecord>,
    /// Custom networking: where placed pods' addresses are.
    pub pods_in: Option<PodsIn>,
    /// What EC2 answered.
    pub tally: Tally,
    /// Addresses held by the nodes and used by no pod, at the end.
    pub idle: u64,
    /// Nodes whose CNI did not start.
    pub nodes_down: usize,
    /// When the subnet stopped being fragmented, if it was and did within the run.
    pub healed_at: Option<Duration>,
    /// Addresses the nodes' ENIs hold for pods at the end, as EC2 has them: in delegated
    /// /28 prefixes, and as secondary /32s.
    pub held: Held,
}

/// Addresses the nodes' ENIs hold for pods (primary addresses aside), as EC2 has them.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Held {
    /// In delegated /28 prefixes (16 each).
    pub in_prefixes: u64,
    /// Secondary /32 addresses.
    pub secondary: u64,
}

impl Held {
    fn of(account: &Account) -> Held {
        // The account holds only the fleet's ENIs: the strays are no ENI's.
        account
            .network_interfaces()
            .iter()
            .fold(Held::default(), |h, e| Held {
                in_prefixes: h.in_prefixes
                    + u64::from(pool::ADDRS_PER_PREFIX) * e.prefixes.len() as u64,
                secondary: h.secondary + e.secondary_ips.len() as u64,
            })
    }
}

struct Plan {
    instance: String,
    launch: Duration,
    pods: Vec<(Duration, Option<Duration>)>,
    /// Custom networking: the node's ENIConfig, by name.
    eni_config: Option<(String, EniConfigSpec)>,
}

/// Custom networking: each node's ENIConfig (by instance), as the cluster holds them: the
/// pod subnet serving the node's subnet, with the primary ENI's security groups. Empty
/// without pod subnets.
fn eni_configs(model: &Model) -> BTreeMap<String, (String, EniConfigSpec)> {
    let subnets = model.subnets();
    let pods_of = |node_subnet: &str| {
        let cidr = subnets
            .iter()
            .find(|s| s.id == node_subnet)?
            .cidr
            .to_string();
        let pods = subnets
            .iter()
            .find(|s| s.tags.get(NODE_SUBNET_TAG) == Some(&cidr))?;
        Some((pods.tags.get(ENI_CONFIG_TAG)?.clone(), pods.id.clone()))
    };
    model
        .instances()
        .into_iter()
        .filter_map(|i| {
            let (name, subnet) = pods_of(&i.subnet_id)?;
            let security_groups = model
                .enis()
                .into_iter()
                .find(|e| e.id == i.primary_eni)
                .map(|e| e.security_groups.clone())
                .unwrap_or_default();
            let spec = EniConfigSpec {
                subnet,
                security_groups,
            };
            Some((i.id.clone(), (name, spec)))
        })
        .collect()
}

/// Where placed pods' addresses are: in their node's own subnet, or in a pod subnet (an
/// ENIConfig's, custom networking); by address, since the subnets do not overlap.
#[derive(Clone, Copy, Debug, Default)]
pub struct PodsIn {
    /// In a subnet nodes are launched in (the primary ENIs').
    pub node_subnets: u64,
    /// In an ENIConfig's subnet.
    pub eni_config_subnets: u64,
}

impl PodsIn {
    fn of(model: &Model, pods: &[PodRecord]) -> PodsIn {
        let subnets = model.subnets();
        let in_subnet = |ip: Ipv4Addr, pod_subnet: bool| {
            subnets
                .iter()
                .any(|s| s.tags.contains_key(ENI_CONFIG_TAG) == pod_subnet && s.cidr.contains(ip))
        };
        let count = |pod_subnet: bool| {
            pods.iter()
                .filter_map(|p| p.address)
                .filter(|ip| in_subnet(*ip, pod_subnet))
                .count() as u64
        };
        PodsIn {
            node_subnets: count(false),
            eni_config_subnets: count(true),
        }
    }
}

/// Runs `scenario` with `algorithm`; `seed` makes the run repeatable (the same seed gives
/// both algorithms the same launches and pods). Must run on a paused clock.
pub async fn run(scenario: &Scenario, algorithm: &Algorithm, seed: u64) -> anyhow::Result<Run> {
    let account = Account::new(
        scenario.model(seed).context("building the VPC")?,
        Options::ec2_like(),
    );
    if let Some((from, until)) = scenario.storm {
        account.storm(from, until);
    }
    // The strays go (someone else's workload leaves): not an EC2 call of this account.
    let healed_at = scenario
        .fragmented_until
        .filter(|until| *until < scenario.horizon);
    let heal = healed_at.map(|until| {
        let account = Arc::clone(&account);
        tokio::spawn(async move {
            tokio::time::sleep(until).await;
            let subnets: Vec<String> =
                account.with_model(|m| m.subnets().iter().map(|s| s.id.clone()).collect());
            for subnet in subnets {
                account
                    .set_fragment(&subnet, Fragment::None)
                    .map_err(|e| anyhow::anyhow!("healing {subnet}: {e}"))?;
            }
            anyhow::Ok(())
        })
    });
    let records = Records::default();
    let mut rng = Rng::seeded(seed);
    let configs = account.with_model(|m| eni_configs(m));
    let instances: Vec<String> =
        account.with_model(|m| m.instances().iter().map(|i| i.id.clone()).collect());
    let plans: Vec<Plan> = instances
        .into_iter()
        .map(|instance| {
            let eni_config = configs.get(&instance).cloned();
            let launch = scenario.launch_window.mul_f64(rng.unit()) + scenario.boot;
            let (lo, hi) = scenario.pods;
            let n = lo + (rng.unit() * f64::from(hi - lo + 1)) as u32;
            let pods = (0..n.min(hi))
                .map(|_| {
                    let at = scenario.bind_spread.mul_f64(rng.unit());
                    let life = scenario
                        .lifetime
                        .map(|mean| mean.mul_f64(-(1.0 - rng.unit()).ln()));
                    (at, life)
                })
                .collect();
            Plan {
                instance,
                launch,
                pods,
                eni_config,
            }
        })
        .collect();
    let end = Instant::now() + scenario.horizon;
    let mut nodes = Vec::new();
    for (i, plan) in plans.into_iter().enumerate() {
        let account = Arc::clone(&account);
        let records = records.clone();
        let algorithm = algorithm.clone();
        let horizon = scenario.horizon;
        let lifetime_mean = scenario.lifetime;
        let node_seed = seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9);
        nodes.push(tokio::spawn(async move {
            tokio::time::sleep(plan.launch).await;
            let life = Life {
                account: &account,
                records: &records,
                horizon,
                lifetime_mean,
                seed: node_seed,
                end,
            };
            let eni_config = plan.eni_config.clone();
            match algorithm {
                Algorithm::Ours(env) => {
                    let start = || {
                        Ours::start(
                            &account,
                            &plan.instance,
                            &env,
                            eni_config.clone(),
                            node_seed,
                        )
                    };
                    life.run_if_started(crash_loop(&account, horizon, start).await, plan)
                        .await
                }
                Algorithm::GoCni(mut opts) => {
                    if opts.custom_networking {
                        opts.eni_config_subnet = eni_config.map(|(_, spec)| spec.subnet);
                    }
                    let start = || GoCni::start(&account, &plan.instance, opts.clone(), node_seed);
                    life.run_if_started(crash_loop(&account, horizon, start).await, plan)
                        .await
                }
            }
        }));
    }
    let mut idle = 0;
    let mut nodes_down = 0;
    for n in nodes {
        match n.await.ok().flatten() {
            Some(held) => idle += u64::from(held),
            None => nodes_down += 1,
        }
    }
    if let Some(heal) = heal {
        heal.await.context("the heal task")??;
    }
    let pods = records.all();
    let pods_in = scenario
        .custom_networking()
        .then(|| account.with_model(|m| PodsIn::of(m, &pods)));
    Ok(Run {
        pods,
        pods_in,
        tally: account.tally(),
        idle,
        nodes_down,
        healed_at,
        held: Held::of(&account),
    })
}

/// Starts a node's CNI as the kubelet runs a DaemonSet pod whose container exits: again after
/// 10 s, doubling up to 5 min (CrashLoopBackOff), until `horizon`.
pub async fn crash_loop<T, F, Fut>(account: &Account, horizon: Duration, start: F) -> Option<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut backoff = Duration::from_secs(10);
    loop {
        if let Ok(cni) = start().await {
            return Some(cni);
        }
        if account.elapsed() + backoff >= horizon {
            return None;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(300));
    }
}

/// What a node's life needs besides its CNI and its plan.
struct Life<'a> {
    account: &'a Arc<Account>,
    records: &'a Records,
    horizon: Duration,
    lifetime_mean: Option<Duration>,
    seed: u64,
    end: Instant,
}

impl Life<'_> {
    /// [`Life::run`] on a node whose CNI started; `None` for one whose CNI never did, its
    /// pods recorded as created and never placed.
    async fn run_if_started<C: Cni>(&self, cni: Option<C>, plan: Plan) -> Option<u32> {
        match cni {
            Some(cni) => Some(self.run(cni, plan).await),
            None => {
                for (at, _) in &plan.pods {
                    self.records.created(plan.launch + *at);
                }
                None
            }
        }
    }

    /// One node's life: its pods bound, run and (with churn) replaced until the end; returns
    /// the addresses it holds unused then.
    async fn run<C: Cni>(&self, cni: C, plan: Plan) -> u32 {
        let cni = Arc::new(cni);
        let mut slots = Vec::new();
        for (slot, (at, first_life)) in plan.pods.into_iter().enumerate() {
            // Created with the node: bound to it once its CNI has started, which may be later
            // (a crash loop), and timed from its creation either way.
            let created = plan.launch + at;
            let cni = Arc::clone(&cni);
            let account = Arc::clone(self.account);
            let records = self.records.clone();
            let instance = plan.instance.clone();
            let (horizon, lifetime_mean) = (self.horizon, self.lifetime_mean);
            let seed = self.seed ^ (slot as u64 + 1).wrapping_mul(0x85eb_ca6b);
            slots.push(tokio::spawn(async move {
                let mut rng = Rng::seeded(seed);
                // The kubelet's own draws, apart from the pods' so both sides get the same pods.
                let mut kubelet = Rng::seeded(seed ^ 0x6b75_6265_6c65_7400);
                tokio::time::sleep(created.saturating_sub(account.elapsed())).await;
                let mut life = first_life;
                let mut created = created;
                for generation in 0.. {
                    let name = format!("{instance}-{slot}-{generation}");
                    let ran = run_pod(
                        &*cni,
                        &account,
                        &records,
                        (&name, created),
                        horizon,
                        life,
                        &mut kubelet,
                    )
                    .await;
                    // Its replacement is created as it goes.
                    created = account.elapsed();
                    if !ran || life.is_none() || account.elapsed() >= horizon {
                        break;
                    }
                    life = lifetime_mean.map(|mean| mean.mul_f64(-(1.0 - rng.unit()).ln()));
                }
            }));
        }
        tokio::time::sleep_until(self.end).await;
        for s in slots {
            s.abort();
        }
        cni.idle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(m: &Model) -> Vec<String> {
        m.vpc().cidrs().iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn the_vpc_takes_a_slash_16_per_1000_nodes_up_to_5000() {
        let m = Scenario::new(Kind::Launch, Some(1_000)).model(1).unwrap();
        assert_eq!(cidrs(&m), ["10.0.0.0/16"]);
        let subnets: Vec<String> = m.subnets().iter().map(|s| s.cidr.to_string()).collect();
        assert_eq!(
            subnets,
            [
                "10.0.0.0/18",
                "10.0.64.0/18",
                "10.0.128.0/18",
                "10.0.192.0/18"
            ]
        );

        let m = Scenario::new(Kind::Launch, Some(2_001)).model(1).unwrap();
        assert_eq!(cidrs(&m), ["10.0.0.0/16", "10.1.0.0/16", "10.2.0.0/16"]);
        let last = m.subnets().last().map(|s| s.cidr.to_string());
        assert_eq!(
            (m.subnets().len(), last.as_deref()),
            (9, Some("10.2.0.0/18"))
        );
        assert_eq!(m.instances().len(), 2_001);

        let m = Scenario::new(Kind::Launch, Some(MAX_NODES))
            .model(1)
            .unwrap();
        assert_eq!((cidrs(&m).len(), m.subnets().len()), (5, 20));
        let err = Scenario::new(Kind::Launch, Some(MAX_NODES + 1))
            .model(1)
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.starts_with("at most 5000 nodes fit the VPC, not 5001")),
            "{err:?}"
        );
    }
}
