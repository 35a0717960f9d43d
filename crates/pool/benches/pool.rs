//! The brain's cost as a node grows: assigning and releasing one address, and one plan, with
//! 250 addresses (secondary /32s on five ENIs, as a large instance without prefix delegation)
//! and 2,048 (/28 prefixes on eight ENIs), half of them held by pods.
//!
//! `cargo bench -p pool`; scripts/bench.sh runs it and writes the figures to
//! docs/reports/benchmarks.md.

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ipnetwork::Ipv4Network;
use pool::{
    AttachmentKey, EniInfo, NodeLimits, PlanContext, PodInfo, Pool, Targets, Timestamp, plan,
};

const NOW: Timestamp = Timestamp(1_000_000_000);

fn key(n: u32) -> AttachmentKey {
    AttachmentKey {
        network: "aws-cni".into(),
        container_id: format!("container-{n:08}"),
        ifname: "eth0".into(),
    }
}

fn eni(device: u8) -> EniInfo {
    EniInfo {
        id: format!("eni-{device:02}"),
        device_number: u32::from(device),
        mac: format!("02:00:00:00:00:{device:02x}"),
        primary_ip: Ipv4Addr::new(10, device, 0, 1),
        subnet_id: "subnet-1".into(),
        subnet_cidr: "10.0.0.0/8".parse().expect("a CIDR"),
        created_at: Timestamp(0),
    }
}

/// A pool of `enis` ENIs with `per_eni` secondary addresses each (`prefixes`: that many /28s
/// each instead), half of every address held by a pod. No cooldown: a released address is
/// available again at once, so every iteration sees the same pool.
fn pool(enis: u8, per_eni: u8, prefixes: bool) -> Pool {
    let mut p = Pool::new(Duration::ZERO);
    for d in 0..enis {
        p.upsert_eni(eni(d));
        if prefixes {
            let nets: Vec<Ipv4Network> = (0..per_eni)
                .map(|i| Ipv4Network::new(Ipv4Addr::new(10, d, 1 + i, 0), 28).expect("a /28"))
                .collect();
            p.add_prefixes(&eni(d).id, &nets).expect("prefixes");
        } else {
            let ips: Vec<Ipv4Addr> = (0..per_eni).map(|i| Ipv4Addr::new(10, d, 1, i)).collect();
            p.add_addresses(&eni(d).id, &ips).expect("addresses");
        }
    }
    let total = p.counts(NOW).total;
    for n in 0..total / 2 {
        p.assign(&key(n), &PodInfo::default(), NOW)
            .expect("an address");
    }
    p
}

fn sizes() -> [(&'static str, Pool, NodeLimits, Targets); 2] {
    [
        (
            "250 secondary",
            pool(5, 50, false),
            NodeLimits {
                max_enis: 15,
                secondary_ips_per_eni: 49,
                max_pods: 737,
            },
            Targets {
                warm_ip: 10,
                minimum_ip: 250,
                ..Targets::default()
            },
        ),
        (
            "2048 prefix",
            pool(8, 16, true),
            NodeLimits {
                max_enis: 15,
                secondary_ips_per_eni: 49,
                max_pods: 4000,
            },
            Targets {
                warm_prefix: 1,
                prefix_delegation: true,
                ..Targets::default()
            },
        ),
    ]
}

fn assign_release(c: &mut Criterion) {
    let mut group = c.benchmark_group("assign + release");
    for (name, mut pool, _, _) in sizes() {
        let pod = PodInfo::default();
        let new = key(u32::MAX);
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let (a, _) = pool.assign(black_box(&new), &pod, NOW).expect("an address");
                pool.release(&new, NOW).expect("held");
                a.ip
            })
        });
    }
    group.finish();
}

fn planning(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    for (name, pool, limits, targets) in sizes() {
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| plan(black_box(&pool), &limits, &targets, PlanContext::at(NOW)))
        });
    }
    group.finish();
}

criterion_group!(benches, assign_release, planning);
criterion_main!(benches);
