#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::time::Duration;

use pool::*;

pub const COOLDOWN: Duration = Duration::from_secs(30);

pub fn eni(id: &str, device: u32, primary_ip: &str) -> EniInfo {
    EniInfo {
        id: id.into(),
        device_number: device,
        mac: format!("02:00:00:00:00:{device:02x}"),
        primary_ip: primary_ip.parse().unwrap(),
        subnet_id: "subnet-1".into(),
        subnet_cidr: "10.0.0.0/24".parse().unwrap(),
        created_at: Timestamp(0),
    }
}

pub fn key(n: u32) -> AttachmentKey {
    AttachmentKey {
        network: "aws-cni".into(),
        container_id: format!("c{n}"),
        ifname: "eth0".into(),
    }
}

pub fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// A pool with the primary ENI (10.0.0.10) holding 10.0.0.11..=10.0.0.(10+n).
pub fn pool_with(n: u8) -> Pool {
    let mut p = Pool::new(COOLDOWN);
    p.upsert_eni(eni("eni-0", 0, "10.0.0.10"));
    let ips: Vec<Ipv4Addr> = (1..=n).map(|i| Ipv4Addr::new(10, 0, 0, 10 + i)).collect();
    p.add_addresses("eni-0", &ips).unwrap();
    p
}
