//! EC2 calls whose answers go missing or that EC2 refuses for a while, with replaced seams: a
//! lost CreateNetworkInterface answer costs no second ENI, a delete refused while EC2 still
//! detaches waits for the detach, and the daemon never retries what the EC2 client retries.

use crate::support;

use cloud::{CloudError, CloudErrorKind};
use support::*;

fn calls_of(ec2: &Cloud, api: &str) -> usize {
    ec2.calls().iter().filter(|c| c.starts_with(api)).count()
}

/// The next ENI cannot be attached, so ipamd deletes it at once.
fn refuse_next_attach(ec2: &Cloud) {
    ec2.fail_next(
        cloud::Action::AttachNetworkInterface,
        vec![CloudError::from_code(
            cloud::Action::AttachNetworkInterface.wire_name(),
            "AttachmentLimitExceeded",
            "limit",
        )],
    );
}

fn unavailable(api: &str) -> CloudError {
    CloudError::new(api, CloudErrorKind::Unavailable, "connection reset")
}

#[tokio::test]
async fn lost_create_answers_are_resent_with_the_same_token_and_cost_one_eni() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let d = start(dir.path(), &ec2, &ManualClock::at(0)).await;
    assert_eq!(ec2.enis().len(), 1);

    // EC2 creates the ENI every time, but three answers in a row never arrive.
    ec2.account()
        .lose_answers(cloud::Action::CreateNetworkInterface, 3);
    allocate(&d, 1).await;
    for _ in 0..3 {
        d.grow().await;
    }
    assert_eq!(
        calls_of(&ec2, cloud::Action::CreateNetworkInterface.wire_name()),
        3
    );
    assert_eq!(
        ec2.enis().len(),
        2,
        "the resent requests were recognised by their token: {:?}",
        ec2.calls()
    );
    assert_eq!(
        calls_of(&ec2, cloud::Action::AttachNetworkInterface.wire_name()),
        0
    );

    // The fourth answer arrives: that one ENI is attached and used.
    d.grow().await;
    assert_eq!(ec2.enis().len(), 2);
    assert!(ec2.enis().iter().all(|e| e.attachment.is_some()));
    assert_eq!(d.pool_snapshot().enis().count(), 2);

    // The next ENI is a new request with a new token.
    for n in 2..=6 {
        allocate(&d, n).await;
    }
    d.grow().await;
    assert_eq!(ec2.enis().len(), 3, "{:?}", ec2.calls());
}

#[tokio::test]
async fn a_refused_create_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let d = start(dir.path(), &ec2, &ManualClock::at(0)).await;
    ec2.account()
        .lose_answers(cloud::Action::CreateNetworkInterface, 1);
    allocate(&d, 1).await;
    d.grow().await;
    // EC2 answers the resent request with a refusal: its token did not create anything the
    // node is waiting for, so the next attempt is a new request.
    ec2.fail_next(
        cloud::Action::CreateNetworkInterface,
        vec![CloudError::from_code(
            cloud::Action::CreateNetworkInterface.wire_name(),
            "UnauthorizedOperation",
            "You are not authorized to perform this operation.",
        )],
    );
    d.grow().await;
    d.grow().await;
    assert_eq!(
        ec2.enis().len(),
        3,
        "one ENI from the lost answer (left to the leaked-ENI cleanup), one new: {:?}",
        ec2.calls()
    );
}

#[tokio::test]
async fn a_delete_refused_while_ec2_detaches_waits_for_the_detach_then_deletes_once_more() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let d = start(dir.path(), &ec2, &ManualClock::at(0)).await;
    // The new ENI cannot be attached, so it is deleted at once; EC2 first says it is in use.
    refuse_next_attach(&ec2);
    ec2.fail_next(
        cloud::Action::DeleteNetworkInterface,
        vec![CloudError::from_code(
            cloud::Action::DeleteNetworkInterface.wire_name(),
            "InvalidNetworkInterface.InUse",
            "The network interface is currently in use.",
        )],
    );
    allocate(&d, 1).await;
    d.grow().await;
    assert_eq!(ec2.enis().len(), 1, "deleted in the end: {:?}", ec2.calls());
    let calls = ec2.calls();
    let deletes: Vec<usize> = (0..calls.len())
        .filter(|i| calls[*i].starts_with(cloud::Action::DeleteNetworkInterface.wire_name()))
        .collect();
    assert_eq!(deletes.len(), 2, "{calls:?}");
    assert!(
        calls[deletes[0]..deletes[1]]
            .iter()
            .any(|c| c.starts_with(cloud::Action::DescribeNetworkInterfaces.wire_name())),
        "the second delete waited for EC2 to show the ENI detached: {calls:?}"
    );
}

#[tokio::test]
async fn a_delete_that_keeps_failing_is_sent_once_by_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let d = start(dir.path(), &ec2, &ManualClock::at(0)).await;
    refuse_next_attach(&ec2);
    ec2.fail_next(
        cloud::Action::DeleteNetworkInterface,
        (0..10)
            .map(|_| unavailable(cloud::Action::DeleteNetworkInterface.wire_name()))
            .collect(),
    );
    allocate(&d, 1).await;
    d.grow().await;
    // Retrying is the EC2 client's job (cloud::throttle::Throttled, tested there); this EC2
    // is not behind it, so every request the daemon itself sends shows here.
    assert_eq!(
        calls_of(&ec2, cloud::Action::DeleteNetworkInterface.wire_name()),
        1,
        "{:?}",
        ec2.calls()
    );
    assert_eq!(ec2.enis().len(), 2, "left for the leaked-ENI cleanup");
}
