use std::sync::Arc;

use cloud::{Action, CloudError, CloudErrorKind, Ec2, Imds};

use super::*;
use crate::faults::Faults;
use crate::iam::IamPolicy;
use crate::model::{Model, SubnetSpec, Topology};
use crate::rand::Rng;

/// One t3.medium in 10.0.0.0/24, answering at once.
fn account() -> (Arc<Account>, String) {
    let t = Topology {
        vpc_cidr: "10.0.0.0/16".parse().unwrap(),
        secondary_cidrs: vec![],
        region: "us-west-2".into(),
        subnets: vec![SubnetSpec::new("10.0.0.0/24".parse().unwrap())],
        security_groups: vec![],
        ipv6: false,
        vpc_ipv6_cidr: None,
        nodes: 1,
        instance_type: "t3.medium".into(),
        extra_types: vec![],
    };
    let account = Account::new(
        Model::build(&t, Rng::seeded(7), 0).unwrap(),
        Options::instant(),
    );
    let instance = account.with_model(|m| m.instances()[0].id.clone());
    (account, instance)
}

fn primary(account: &Account, instance: &str) -> String {
    account.with_model(|m| m.instance(instance).unwrap().primary_eni.clone())
}

#[tokio::test]
async fn calls_reach_the_model_and_are_logged() {
    let (account, instance) = account();
    let ec2 = NodeEc2::new(&account);
    let eni = primary(&account, &instance);
    let ips = ec2.assign_private_ips(&eni, 2).await.unwrap();
    assert_eq!(ips.len(), 2);
    let seen = ec2.describe_instance_enis(&instance).await.unwrap();
    assert_eq!(seen[0].secondary_ips, ips);
    assert_eq!(
        account.calls(),
        [
            format!("{}({eni},2)", Action::AssignPrivateIpAddresses),
            format!(
                "{}(attachment.instance-id={instance})",
                Action::DescribeNetworkInterfaces
            ),
        ]
    );
    assert_eq!(account.tally().total(), 2);
    let imds = NodeImds::new(&account, &instance);
    assert_eq!(
        imds.get("meta-data/instance-id").await.unwrap(),
        Some(instance)
    );
}

#[tokio::test]
async fn a_fault_plan_throttles_in_process_as_over_http() {
    let (account, instance) = account();
    let ec2 = NodeEc2::new(&account);
    let eni = primary(&account, &instance);
    account
        .set_faults(Faults {
            throttle_pct: 100.0,
            actions: Some(vec![Action::AssignPrivateIpAddresses.to_string()]),
            ..Faults::default()
        })
        .unwrap();
    let e = ec2.assign_private_ips(&eni, 1).await.unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Throttled, "{e}");
    assert!(ec2.describe_instance_enis(&instance).await.is_ok());
    assert_eq!(account.fault_report().injected.throttle, 1);
    let held = account.with_model(|m| m.eni(&eni).unwrap().secondary_ips.len());
    assert_eq!(held, 0, "a throttled call changes nothing");
}

#[tokio::test]
async fn an_iam_denial_is_unauthorized_and_changes_nothing() {
    let (account, instance) = account();
    let ec2 = NodeEc2::new(&account);
    let eni = primary(&account, &instance);
    let deny = Action::AssignPrivateIpAddresses;
    account
        .set_iam(IamPolicy {
            deny: [deny.to_string()].into(),
        })
        .unwrap();
    let e = ec2.assign_private_ips(&eni, 1).await.unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Unauthorized, "{e}");
    assert!(e.message.contains(&format!("ec2:{deny}")), "{e}");
    assert_eq!(account.iam_report().denied, 1);
    let held = account.with_model(|m| m.eni(&eni).unwrap().secondary_ips.len());
    assert_eq!(held, 0);
}

#[tokio::test]
async fn scripted_failures_come_first_and_lost_answers_still_apply() {
    let (account, instance) = account();
    let ec2 = NodeEc2::new(&account);
    let eni = primary(&account, &instance);
    let assign = Action::AssignPrivateIpAddresses;
    account.fail_next(
        assign,
        vec![CloudError::new(assign, CloudErrorKind::Unavailable, "x")],
    );
    let e = ec2.assign_private_ips(&eni, 1).await.unwrap_err();
    assert_eq!(e.message, "x");
    account.lose_answers(assign, 1);
    let e = ec2.assign_private_ips(&eni, 1).await.unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Unavailable, "{e}");
    let held = account.with_model(|m| m.eni(&eni).unwrap().secondary_ips.len());
    assert_eq!(held, 1, "the lost answer's call took effect");
    assert_eq!(ec2.assign_private_ips(&eni, 1).await.unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn ec2_like_accounts_take_their_time_and_run_out_of_tokens() {
    let (account, instance) = account();
    let model = account.with_model(|m| m.clone());
    let slow = Account::new(model, Options::ec2_like());
    let ec2 = NodeEc2::new(&slow);
    let started = tokio::time::Instant::now();
    ec2.describe_instance_enis(&instance).await.unwrap();
    assert_eq!(
        started.elapsed(),
        ec2_latency(Action::DescribeNetworkInterfaces)
    );
    slow.storm(
        std::time::Duration::ZERO,
        std::time::Duration::from_secs(3600),
    );
    let e = ec2.describe_instance_enis(&instance).await.unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Throttled, "{e}");
    assert_eq!(slow.tally().throttled, 1);
    assert!(slow.calls().is_empty(), "ec2_like logs no calls");
}

#[tokio::test]
async fn filtered_describes_select_as_the_http_api_does() {
    let (account, instance) = account();
    let ec2 = NodeEc2::new(&account);
    let tag = |k: &str, v: &str| [(k.to_string(), v.to_string())].into();
    let subnet = account.with_model(|m| m.subnets()[0].id.clone());
    let leaked = ec2
        .create_network_interface(&cloud::CreateEni {
            subnet_id: subnet.clone(),
            tags: tag("node.k8s.amazonaws.com/instance_id", "i-0gone"),
            ..cloud::CreateEni::default()
        })
        .await
        .unwrap();
    let f = cloud::EniFilter::new;
    let found = ec2
        .find_network_interfaces(&[
            f("tag-key", "node.k8s.amazonaws.com/instance_id"),
            f("status", "available"),
        ])
        .await
        .unwrap();
    assert_eq!(found, std::slice::from_ref(&leaked));
    let attached = ec2
        .find_network_interfaces(&[f("attachment.instance-id", &instance)])
        .await
        .unwrap();
    assert_eq!(attached.len(), 1);
    assert_eq!(attached[0].id, primary(&account, &instance));
    let e = ec2
        .find_network_interfaces(&[f("no-such-filter", "x")])
        .await
        .unwrap_err();
    assert_eq!(e.code.as_deref(), Some("InvalidParameterValue"), "{e}");

    let other = account.with_model(|m| {
        m.add_subnet(
            "10.0.1.0/24".parse().unwrap(),
            None,
            tag("kubernetes.io/role/cni", "1"),
        )
        .unwrap()
    });
    let tagged = ec2
        .describe_subnets(&[f("tag:kubernetes.io/role/cni", "1")])
        .await
        .unwrap();
    assert_eq!(tagged.len(), 1);
    assert_eq!(
        (tagged[0].id.as_str(), tagged[0].available_ips),
        (other.as_str(), 251)
    );
    let e = ec2
        .describe_subnets(&[f("default-for-az", "true")])
        .await
        .unwrap_err();
    assert_eq!(e.code.as_deref(), Some("InvalidParameterValue"), "{e}");
    assert_eq!(
        account.network_interface(&leaked.id),
        Some(leaked),
        "read outside EC2's accounting"
    );
    assert_eq!(account.network_interfaces().len(), 2);
    assert_eq!(account.calls().len(), 6, "the reads are not EC2 calls");
}

#[tokio::test]
async fn a_fragmented_subnet_refuses_prefixes_in_process_until_healed() {
    use crate::model::{Fragment, ModelError};
    let (account, instance) = account();
    let ec2 = NodeEc2::new(&account);
    let eni = primary(&account, &instance);
    let subnet = account.with_model(|m| m.subnets()[0].id.clone());
    let r = account.set_fragment(&subnet, Fragment::All).unwrap();
    assert_eq!((r.strays, r.free_prefixes), (14, 0));
    assert_eq!(account.fragment_reports(), [r]);
    let e = ec2.assign_ipv4_prefixes(&eni, 1).await.unwrap_err();
    assert_eq!(e.code.as_deref(), Some("InsufficientCidrBlocks"), "{e}");
    assert_eq!(ec2.assign_private_ips(&eni, 2).await.unwrap().len(), 2);
    let healed = account.set_fragment(&subnet, Fragment::None).unwrap();
    assert_eq!((healed.strays, healed.free_prefixes), (0, 14));
    assert_eq!(ec2.assign_ipv4_prefixes(&eni, 1).await.unwrap().len(), 1);
    assert_eq!(
        account.set_fragment("subnet-0000000000000000f", Fragment::All),
        Err(ModelError::SubnetNotFound(vec![
            "subnet-0000000000000000f".into()
        ]))
    );
    assert_eq!(account.tally().total(), 3, "fragmenting is no EC2 call");
}

#[tokio::test]
async fn security_groups_are_replaced_through_the_account_and_logged() {
    let (account, instance) = account();
    let ec2 = NodeEc2::new(&account);
    let eni = primary(&account, &instance);
    let groups = account.with_model(|m| m.eni(&eni).unwrap().security_groups.clone());
    ec2.set_security_groups(&eni, &groups).await.unwrap();
    assert_eq!(
        account.calls(),
        [format!(
            "{}({eni},groups={})",
            Action::ModifyNetworkInterfaceAttribute,
            groups.join(",")
        )]
    );
    assert_eq!(
        account.tally().calls[&Action::ModifyNetworkInterfaceAttribute],
        1
    );
    // EC2 refuses a group it does not know, and the ENI keeps its own.
    let e = ec2
        .set_security_groups(&eni, &["sg-00000000000000000".to_string()])
        .await
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::NotFound, "{e}");
    let kept = account.with_model(|m| m.eni(&eni).unwrap().security_groups.clone());
    assert_eq!(kept, groups);
}
