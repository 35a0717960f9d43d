//! ipamd started on damaged state: a truncated database, an unopenable one, unreadable
//! records. It starts, live pods keep their addresses (the node's routes say which), addresses
//! whose state is lost cool down before reuse, and nothing is handed out twice.

use crate::support;

use std::collections::BTreeSet;
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use ipamd::daemon::RECOVERED_NETWORK;
use pool::Clock;
use support::*;

/// Three pods; the third is deleted (its address cools). Returns the three addresses.
async fn three_pods_one_deleted(node: &Node) -> [Ipv4Addr; 3] {
    let d = node.start(&[]).await;
    let ips = [
        ipv4_of(&d, 1).await,
        ipv4_of(&d, 2).await,
        ipv4_of(&d, 3).await,
    ];
    d.handle(del(3)).await.unwrap();
    d.flush().await.unwrap();
    ips
}

/// Waits (bounded) until no sled holds the state database's lock: sled lets go of it from a
/// background thread shortly after the daemon is dropped.
fn wait_unlocked(dir: &Path) {
    let db = dir.join("state/db");
    testkit::wait_until(
        Duration::from_secs(10),
        "the stopped daemon's sled to release the database lock",
        || File::open(&db).is_ok_and(|f| f.try_lock().is_ok()),
    );
}

/// Opens the closed store's database directly.
fn raw_db(dir: &Path) -> sled::Db {
    wait_unlocked(dir);
    sled::open(dir.join("state")).expect("the state database opens")
}

fn addr_key(ip: Ipv4Addr) -> Vec<u8> {
    [b"ip/".as_slice(), &ip.octets()].concat()
}

fn recovered(d: &TestDaemon) -> BTreeSet<(Ipv4Addr, String)> {
    d.pool_snapshot()
        .allocations()
        .into_iter()
        .filter(|a| a.key.network == RECOVERED_NETWORK)
        .map(|a| (a.ip, a.key.container_id))
        .collect()
}

#[tokio::test]
async fn a_truncated_store_is_rebuilt_and_live_pods_keep_their_addresses() {
    let node = Node::at(1_000);
    let [a, b, c] = three_pods_one_deleted(&node).await;
    // Pods 1 and 2 run on; a veth of someone else's prefix is not ours to judge.
    node.host.routes.lock().unwrap().extend([
        (a.into(), "enia1".to_string()),
        (b.into(), "enib2".to_string()),
        (Ipv4Addr::new(10, 0, 0, 99).into(), "cali0".to_string()),
    ]);
    let db = node.dir.path().join("state/db");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(100)
        .unwrap();

    let d = node.start(&[]).await;
    assert_eq!(
        recovered(&d),
        BTreeSet::from([(a, "enia1".to_string()), (b, "enib2".to_string())]),
        "the live pods' addresses are held"
    );
    let now = node.clock.now();
    let primary: Vec<_> = d
        .pool_snapshot()
        .addresses(&node.ec2.primary)
        .map(|(ip, s)| (ip, s.clone()))
        .collect();
    for (ip, slot) in &primary {
        assert!(
            slot.is_assigned() || slot.is_cooling(now),
            "{ip} is handed out at once although its state was lost: {slot:?}"
        );
    }
    assert!(
        primary.iter().any(|(ip, _)| *ip == c),
        "{c} is still in the pool"
    );
    // New pods get addresses nobody may still be using: growth brought fresh ones.
    let fresh = ipv4_of(&d, 4).await;
    assert!(![a, b, c].contains(&fresh), "{fresh} handed out again");
    assert!(
        primary.iter().all(|(ip, _)| *ip != fresh),
        "{fresh} came from the primary ENI"
    );

    // Pod 1 goes; its DEL cannot name the recovered key, but its route is gone.
    node.host
        .routes
        .lock()
        .unwrap()
        .retain(|(ip, _)| *ip != std::net::IpAddr::V4(a));
    node.host.gone.lock().unwrap().insert(a.into());
    d.reconcile().await;
    assert_eq!(recovered(&d), BTreeSet::from([(b, "enib2".to_string())]));
    assert!(d.pool_snapshot().counts(node.clock.now()).cooling >= 1);
    let slot = d
        .pool_snapshot()
        .addresses(&node.ec2.primary)
        .find(|(ip, _)| *ip == a)
        .map(|(_, s)| s.clone())
        .unwrap();
    assert!(slot.is_cooling(node.clock.now()), "{slot:?}");

    // A later restart on intact state is not damage: the recovered key is kept as stored.
    drop(d);
    let d = node.start(&[]).await;
    assert_eq!(recovered(&d), BTreeSet::from([(b, "enib2".to_string())]));
    assert_eq!(
        d.pool_snapshot().get(&pool_key(4)).map(|x| x.ip),
        Some(fresh)
    );
}

#[tokio::test]
async fn unreadable_records_lose_only_their_own_addresses() {
    let node = Node::at(1_000);
    let [a, b, c] = three_pods_one_deleted(&node).await;
    node.host.routes.lock().unwrap().extend([
        (a.into(), "enia1".to_string()),
        (b.into(), "enib2".to_string()),
    ]);
    {
        let db = raw_db(node.dir.path());
        db.insert(addr_key(b), b"{\"ip\":".as_slice()).unwrap();
        db.insert(addr_key(c), b"\xff\xff".as_slice()).unwrap();
        db.flush().unwrap();
    }
    // Well past the first cooldown of c: only the loss can make it cool now.
    node.clock.advance(std::time::Duration::from_secs(3600));

    let d = node.start(&[]).await;
    let pool = d.pool_snapshot();
    assert_eq!(
        pool.get(&pool_key(1)).map(|x| x.ip),
        Some(a),
        "an intact record is kept as it was"
    );
    assert_eq!(recovered(&d), BTreeSet::from([(b, "enib2".to_string())]));
    let now = node.clock.now();
    let slot = |ip: Ipv4Addr| {
        pool.addresses(&node.ec2.primary)
            .find(|(x, _)| *x == ip)
            .map(|(_, s)| s.clone())
            .unwrap()
    };
    assert!(slot(c).is_cooling(now), "{c}: {:?}", slot(c));
    let available = pool
        .addresses(&node.ec2.primary)
        .filter(|(_, s)| s.is_available(now))
        .count();
    assert!(
        available >= 1,
        "addresses whose records were fine stay available"
    );
    let next = ipv4_of(&d, 4).await;
    assert!(![a, b, c].contains(&next), "{next}");
}

#[tokio::test]
async fn an_unopenable_store_is_moved_aside_and_ipamd_starts() {
    let node = Node::at(1_000);
    let [a, _, _] = three_pods_one_deleted(&node).await;
    node.host
        .routes
        .lock()
        .unwrap()
        .push((a.into(), "enia1".to_string()));
    std::fs::write(
        node.dir.path().join("state/conf"),
        b"\xff\xfe not a sled config",
    )
    .unwrap();
    wait_unlocked(node.dir.path());

    let d = node.start(&[]).await;
    assert_eq!(recovered(&d), BTreeSet::from([(a, "enia1".to_string())]));
    let moved = node
        .dir
        .path()
        .join(format!("state.corrupt-{}", node.clock.now().0 / 1000));
    assert!(
        moved.join("conf").exists(),
        "the damaged database is kept at {}",
        moved.display()
    );
}
