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

pub fn allocation(a: &pool::Allocated) -> proto::Allocation {
    proto::Allocation {
        key: proto::AttachmentKey {
            network: a.key.network.clone(),
            container_id: a.key.container_id.clone(),
            ifname: a.key.ifname.clone(),
        },
        pod: proto::PodMeta {
            namespace: a.pod.namespace.clone(),
            name: a.pod.name.clone(),
            infra_container_id: a.pod.infra_container_id.clone(),
            uid: a.pod.uid.clone(),
        },
        ip: Some(a.ip),
        ipv6: None,
        eni_id: a.eni_id.clone(),
        device_number: a.device_number,
        route_table: a.route_table,
    }
}

pub fn counts(c: pool::Counts) -> proto::PoolCounts {
    proto::PoolCounts {
        total: c.total,
        assigned: c.assigned,
        cooling: c.cooling,
        available: c.available,
    }
}
