//! Between the wire types of ipam-proto and the pool's own (the pool depends on no other
//! workspace crate, so each side has its types).

use ipam_proto as proto;

pub fn key(k: &proto::AttachmentKey) -> pool::AttachmentKey {
    pool::AttachmentKey {
        network: k.network.clone(),
        container_id: k.container_id.clone(),
        ifname: k.ifname.clone(),
    }
}

pub fn pod(p: &proto::PodMeta, netns: &str) -> pool::PodInfo {
    pool::PodInfo {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        infra_container_id: p.infra_container_id.clone(),
        uid: p.uid.clone(),
        netns: netns.to_string(),
    }
}

/// The wire form of what an attachment holds: its IPv4 address, its IPv6 address, or both
/// (`None` for both only when it holds nothing, which callers never pass).
pub fn allocation(
    v4: Option<&pool::Allocated>,
    v6: Option<&pool::Allocated6>,
) -> Option<proto::Allocation> {
    let (key, pod, eni_id) = match (v4, v6) {
        (Some(a), _) => (&a.key, &a.pod, &a.eni_id),
        (None, Some(a)) => (&a.key, &a.pod, &a.eni_id),
        (None, None) => return None,
    };
    Some(proto::Allocation {
        key: proto::AttachmentKey {
            network: key.network.clone(),
            container_id: key.container_id.clone(),
            ifname: key.ifname.clone(),
        },
        pod: proto::PodMeta {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            infra_container_id: pod.infra_container_id.clone(),
            uid: pod.uid.clone(),
        },
        ip: v4.map(|a| a.ip),
        ipv6: v6.map(|a| a.ip),
        egress_ipv4: v6.and_then(|a| a.egress_v4),
        eni_id: eni_id.clone(),
        // An IPv6-only pod's address is on the primary ENI, routed by the main table.
        device_number: v4.map_or(0, |a| a.device_number),
        route_table: v4.map_or(netops::RT_TABLE_MAIN, |a| {
            netops::eni_table(a.device_number)
        }),
    })
}

pub fn counts(c: pool::Counts) -> proto::PoolCounts {
    proto::PoolCounts {
        total: c.total,
        assigned: c.assigned,
        cooling: c.cooling,
        available: c.available,
    }
}
