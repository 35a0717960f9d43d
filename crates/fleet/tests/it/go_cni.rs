//! The Go CNI's model, one node at a time on an account that answers at once and logs every
//! call: what its code does at init, on a full subnet, on failed calls, with warm-IP targets,
//! prefix delegation and custom networking. On the simulated clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cloud::{Action, CloudError};
use fleet::go_cni::{GoCni, GoOptions};
use fleet::node::{AddOutcome, Cni, Records, run_pod};
use fleet::scenario::crash_loop;
use pool::Targets;
use vpc_sim::inproc::{Account, Options};
use vpc_sim::model::{CreateEni, Model, SubnetSpec, Topology};
use vpc_sim::rand::Rng;

/// One m5.xlarge (4 ENIs of 14 secondary addresses) in 10.0.0.0/24, and a second /24 for
/// custom networking.
fn account() -> (Arc<Account>, String) {
    let t = Topology {
        vpc_cidr: "10.0.0.0/16".parse().unwrap(),
        secondary_cidrs: vec![],
        region: "us-west-2".into(),
        subnets: vec![
            SubnetSpec::new("10.0.0.0/24".parse().unwrap()),
            SubnetSpec::new("10.0.1.0/24".parse().unwrap()),
        ],
        security_groups: vec![],
        ipv6: false,
        vpc_ipv6_cidr: None,
        nodes: 1,
        instance_type: "m5.xlarge".into(),
        extra_types: vec![],
    };
    let account = Account::new(
        Model::build(&t, Rng::seeded(7), 0).unwrap(),
        Options::instant(),
    );
    let instance = account.with_model(|m| m.instances()[0].id.clone());
    (account, instance)
}

fn subnets(account: &Account) -> Vec<String> {
    account.with_model(|m| m.subnets().iter().map(|s| s.id.clone()).collect())
}

/// Someone else takes every free address of the node's subnet.
fn fill(account: &Account) {
    let subnet = subnets(account)[0].clone();
    account.with_model(|m| {
        while m.subnet(&subnet).unwrap().available_ip_address_count() > 0 {
            let free = m.subnet(&subnet).unwrap().available_ip_address_count();
            let req = CreateEni {
                subnet_id: subnet.clone(),
                description: "another team's workload".into(),
                secondary_count: free.clamp(1, 50) - 1,
                ..Default::default()
            };
            m.create_eni(req, 0).unwrap();
        }
    });
}

/// The actions called so far, in order.
fn ops(account: &Account) -> Vec<String> {
    account
        .calls()
        .iter()
        .map(|c| c.split('(').next().unwrap_or_default().to_string())
        .collect()
}

fn count(account: &Account, action: Action) -> usize {
    ops(account)
        .iter()
        .filter(|o| **o == action.to_string())
        .count()
}

fn names(actions: &[Action]) -> Vec<String> {
    actions.iter().map(ToString::to_string).collect()
}

fn throttled(action: Action, n: usize) -> Vec<CloudError> {
    (0..n)
        .map(|_| CloudError::from_code(action.to_string(), "RequestLimitExceeded", "busy"))
        .collect()
}

async fn start(account: &Arc<Account>, instance: &str, opts: GoOptions) -> GoCni {
    GoCni::start(account, instance, opts, 1).await.unwrap()
}

async fn sleep(secs: u64) {
    tokio::time::sleep(Duration::from_secs(secs)).await;
}

/// Places pod `name`, trying every second for a minute.
async fn place(cni: &GoCni, name: &str) {
    for _ in 0..60 {
        if matches!(cni.add(name).await, AddOutcome::Placed(_)) {
            return;
        }
        sleep(1).await;
    }
    panic!("{name} got no address");
}

#[tokio::test(start_paused = true)]
async fn go_init_makes_the_go_cnis_calls_then_only_the_leak_cleanup_within_5_minutes() {
    use Action::*;
    let (account, instance) = account();
    let _cni = start(&account, &instance, GoOptions::default()).await;
    // ipamd.go:488, 531, 540 → 1297, 595, 664.
    assert_eq!(
        ops(&account),
        names(&[
            DescribeNetworkInterfaces,
            CreateTags,
            DescribeSubnets,
            ModifyNetworkInterfaceAttribute,
            AssignPrivateIpAddresses
        ])
    );
    // Then, idle: the reconcile reads IMDS only; the leaked-ENI cleanup makes one filtered
    // DescribeNetworkInterfaces within 300 s.
    sleep(301).await;
    let calls = account.calls();
    assert_eq!(calls.len(), 6, "{calls:?}");
    assert_eq!(calls[5], format!("{DescribeNetworkInterfaces}(3 filters)"));
}

#[tokio::test(start_paused = true)]
async fn a_throttled_create_tags_crash_loops_the_go_node_until_it_starts() {
    let (account, instance) = account();
    // TagENI's 5 tries of 3 SDK attempts each (awsutils.go:1398), all throttled.
    account.fail_next(Action::CreateTags, throttled(Action::CreateTags, 15));
    let started = crash_loop(&account, Duration::from_secs(900), || {
        GoCni::start(&account, &instance, GoOptions::default(), 1)
    })
    .await;
    assert!(started.is_some(), "the second start succeeds");
    assert_eq!(count(&account, Action::CreateTags), 16);
    assert_eq!(
        count(&account, Action::DescribeNetworkInterfaces),
        2,
        "init ran twice"
    );
    // The first start gave up on its own retries, then CrashLoopBackOff's 10 s.
    assert!(account.elapsed() >= Duration::from_secs(10 + 7));
}

#[tokio::test(start_paused = true)]
async fn a_full_subnet_sends_the_go_node_to_a_new_eni_and_only_that_pauses_growth() {
    use Action::*;
    let (account, instance) = account();
    fill(&account);
    // The pre-scale's failures are a full subnet's: not fatal.
    let _cni = start(&account, &instance, GoOptions::default()).await;
    let init = ops(&account);
    assert_eq!(
        init[4..],
        names(&[
            AssignPrivateIpAddresses,
            AssignPrivateIpAddresses,
            DescribeSubnets,
            CreateNetworkInterface
        ])
    );
    let growth =
        |a: &Account| count(a, AssignPrivateIpAddresses) + count(a, CreateNetworkInterface);
    let before = growth(&account);
    sleep(110).await;
    assert_eq!(growth(&account), before, "paused for 120 s");
    sleep(20).await;
    assert!(growth(&account) > before, "growing again after the pause");
}

#[tokio::test(start_paused = true)]
async fn with_no_eni_slot_left_a_full_subnet_never_pauses_the_go_node() {
    let (account, instance) = account();
    fill(&account);
    let opts = GoOptions {
        max_enis: Some(1),
        ..GoOptions::default()
    };
    let _cni = start(&account, &instance, opts).await;
    sleep(60).await;
    // Two failing AssignPrivateIpAddresses every 5 s round, no new ENI, no pause.
    assert!(count(&account, Action::AssignPrivateIpAddresses) >= 2 * 12);
    assert_eq!(count(&account, Action::CreateNetworkInterface), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_attach_deletes_the_new_eni() {
    let (account, instance) = account();
    let cni = start(&account, &instance, GoOptions::default()).await;
    let refusal = CloudError::from_code("AttachNetworkInterface", "InvalidParameterValue", "no");
    account.fail_next(Action::AttachNetworkInterface, vec![refusal]);
    place(&cni, "pod-0").await;
    sleep(30).await;
    assert_eq!(count(&account, Action::AttachNetworkInterface), 2);
    assert_eq!(count(&account, Action::DeleteNetworkInterface), 1);
    // The next round's ENI is attached; the first is gone, none is left available.
    let mine: Vec<_> = account
        .network_interfaces()
        .into_iter()
        .filter(|e| e.description.starts_with("aws-K8S-"))
        .collect();
    assert_eq!(mine.len(), 1);
    assert!(mine[0].attachment.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_go_eni_whose_detach_fails_is_re_adopted_by_the_reconcile() {
    let (account, instance) = account();
    let cni = start(&account, &instance, GoOptions::default()).await;
    for i in 0..14 {
        place(&cni, &format!("pod-{i}")).await;
    }
    sleep(10).await;
    let enis = cni.enis();
    assert_eq!(enis.len(), 2, "a second ENI for the warm target");
    let primary = account.with_model(|m| m.instance(&instance).unwrap().primary_eni.clone());
    let second = enis.into_iter().find(|e| *e != primary).unwrap();
    let refusal = CloudError::from_code("DetachNetworkInterface", "InvalidParameterValue", "no");
    account.fail_next(Action::DetachNetworkInterface, vec![refusal; 12]);
    for i in 0..14 {
        cni.del(&format!("pod-{i}")).await;
    }
    // Two ENIs' worth available: the second goes after its first minute, its detach fails
    // 12 times (awsutils.go:1453), and the reconcile takes it back (ipamd.go:1653-1683).
    for _ in 0..400 {
        sleep(1).await;
        if count(&account, Action::DetachNetworkInterface) == 12 && cni.enis().contains(&second) {
            let eni = account.network_interface(&second).unwrap();
            assert!(eni.attachment.is_some(), "still attached");
            assert_eq!(cni.total(), 28, "its addresses are back in the pool");
            return;
        }
    }
    panic!("{second} was not re-adopted");
}

#[tokio::test(start_paused = true)]
async fn in_warm_ip_mode_a_new_eni_comes_with_what_is_short() {
    let (account, instance) = account();
    let opts = GoOptions {
        targets: Targets {
            warm_ip: 2,
            ..Targets::default()
        },
        ..GoOptions::default()
    };
    let cni = start(&account, &instance, opts).await;
    for i in 0..14 {
        place(&cni, &format!("pod-{i}")).await;
    }
    sleep(10).await;
    let primary = account.with_model(|m| m.instance(&instance).unwrap().primary_eni.clone());
    let second = cni.enis().into_iter().find(|e| *e != primary).unwrap();
    // ipamd.go:2551-2568: min(short, perENI), not a full ENI.
    let eni = account.network_interface(&second).unwrap();
    assert_eq!(eni.secondary_ips.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn with_prefix_delegation_free_prefixes_over_the_target_are_given_back() {
    let (account, instance) = account();
    let opts = GoOptions {
        targets: Targets {
            prefix_delegation: true,
            warm_prefix: 1,
            ..Targets::default()
        },
        ..GoOptions::default()
    };
    let cni = start(&account, &instance, opts).await;
    for i in 0..17 {
        place(&cni, &format!("pod-{i}")).await;
    }
    sleep(10).await;
    let primary = account.with_model(|m| m.instance(&instance).unwrap().primary_eni.clone());
    let held = |a: &Account| a.network_interface(&primary).unwrap().prefixes.len();
    assert_eq!(held(&account), 3, "two in use, one warm");
    for i in 0..17 {
        cni.del(&format!("pod-{i}")).await;
    }
    sleep(60).await;
    // ipamd.go:2659-2677, :1516-1527: free /28s over WARM_PREFIX_TARGET go back.
    assert_eq!(held(&account), 1);
    assert!(
        account
            .calls()
            .iter()
            .any(|c| c.starts_with("UnassignPrivateIpAddresses(") && c.ends_with(",prefixes)"))
    );
}

#[tokio::test(start_paused = true)]
async fn under_custom_networking_the_primary_eni_serves_no_pod() {
    let (account, instance) = account();
    let pods_subnet = subnets(&account)[1].clone();
    let opts = GoOptions {
        custom_networking: true,
        eni_config_subnet: Some(pods_subnet.clone()),
        ..GoOptions::default()
    };
    let cni = start(&account, &instance, opts).await;
    let primary = account.with_model(|m| m.instance(&instance).unwrap().primary_eni.clone());
    assert!(
        account
            .network_interface(&primary)
            .unwrap()
            .secondary_ips
            .is_empty()
    );
    let second = cni.enis().into_iter().find(|e| *e != primary).unwrap();
    let eni = account.network_interface(&second).unwrap();
    assert_eq!(eni.subnet_id, pods_subnet);
    assert_eq!(eni.secondary_ips.len(), 14);
    // No security groups set on the ENIs (awsutils.go:687), no subnet lookup for the ENI.
    assert!(!account.calls().iter().any(|c| c.contains("groups=")));
    assert_eq!(
        count(&account, Action::DescribeSubnets),
        2,
        "setupENI's only"
    );
}

/// A CNI whose every ADD fails, noting when.
struct Failing(Arc<Account>, Mutex<Vec<Duration>>);

impl Cni for Failing {
    async fn add(&self, _: &str) -> AddOutcome {
        self.1.lock().unwrap().push(self.0.elapsed());
        AddOutcome::Failed { throttled: false }
    }

    async fn del(&self, _: &str) {}

    fn idle(&self) -> u32 {
        0
    }
}

#[tokio::test(start_paused = true)]
async fn the_kubelet_retries_a_failed_sandbox_10_to_15_s_later() {
    let (account, _) = account();
    let cni = Failing(Arc::clone(&account), Mutex::default());
    let mut jitter = Rng::seeded(3);
    let until = Duration::from_secs(600);
    let ran = run_pod(
        &cni,
        &account,
        &Records::default(),
        ("p", Duration::ZERO),
        until,
        None,
        &mut jitter,
    )
    .await;
    assert!(!ran);
    let at = cni.1.lock().unwrap().clone();
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() > 30);
    for g in &gaps {
        assert!(
            *g >= Duration::from_secs(10) && *g <= Duration::from_secs(15),
            "{g:?}"
        );
    }
    assert!(gaps.iter().any(|g| *g > Duration::from_millis(10_500)));
}
