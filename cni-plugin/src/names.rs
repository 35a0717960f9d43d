//! Which host-side veth name an attachment gets.
//!
//! The name must be the same at ADD, DEL, CHECK and GC time, computed from what each of them
//! knows (CNI_ARGS, or the pod identity ipamd recorded at ADD), so every caller goes through
//! [`host_veth_name`].

use ipam_proto::Allocation;

pub use netops::host_veth_name;

/// [`host_veth_name`] for an allocation ipamd reports (DEL, GC): it carries the pod identity
/// and attachment key the ADD was made with.
pub fn allocation_veth_name(prefix: &str, allocation: &Allocation) -> String {
    host_veth_name(
        prefix,
        &allocation.pod.namespace,
        &allocation.pod.name,
        &allocation.key.container_id,
        &allocation.key.ifname,
    )
}

#[cfg(test)]
mod tests {
    use ipam_proto::{AttachmentKey, PodMeta};
    use netops::RT_TABLE_MAIN;

    use super::*;

    #[test]
    fn kubernetes_pods_get_the_go_cni_name() {
        // `printf default.nginx | sha1sum` = c440f455693b69cdd48a37aa5ecd78038f50413d
        assert_eq!(
            host_veth_name("eni", "default", "nginx", "abc123", "eth0"),
            "enic440f455693"
        );
        // The container id does not matter for a known pod: a restarted sandbox keeps its name.
        assert_eq!(
            host_veth_name("eni", "default", "nginx", "other", "eth0"),
            "enic440f455693"
        );
    }

    #[test]
    fn a_second_interface_of_a_pod_gets_its_own_name() {
        let eth0 = host_veth_name("eni", "default", "nginx", "c1", "eth0");
        let net1 = host_veth_name("eni", "default", "nginx", "c1", "net1");
        assert_ne!(eth0, net1);
        assert_eq!(net1, netops::veth_name("eni", "default", "nginx.net1"));
    }

    #[test]
    fn without_a_pod_name_the_container_id_and_ifname_are_hashed() {
        // `printf c0ffee.eth0 | sha1sum` = 3e52eb8f9f86bf39757e78f0a10e895bf12b14f1
        let name = host_veth_name("eni", "", "", "c0ffee", "eth0");
        assert_eq!(name, "eni3e52eb8f9f8");
        // Different containers, or the same container on another interface, never collide.
        assert_ne!(name, host_veth_name("eni", "", "", "c0ffef", "eth0"));
        assert_ne!(name, host_veth_name("eni", "", "", "c0ffee", "eth1"));
        // A namespace alone (no pod name) does not switch to the pod scheme, nor does a name
        // alone: podman sends its container name as K8S_POD_NAME without a namespace, and
        // container names are unique only within one podman store.
        assert_eq!(name, host_veth_name("eni", "default", "", "c0ffee", "eth0"));
        assert_eq!(name, host_veth_name("eni", "", "web", "c0ffee", "eth0"));
    }

    #[test]
    fn the_prefix_is_kept_and_names_fit_the_kernel_limit() {
        let name = host_veth_name("veth", "kube-system", "coredns-1", "c", "eth0");
        assert!(name.starts_with("veth"));
        assert_eq!(name.len(), 15);
    }

    #[test]
    fn allocations_name_their_veth_like_the_add_did() {
        let allocation = Allocation {
            key: AttachmentKey {
                network: "aws-cni".into(),
                container_id: "abc".into(),
                ifname: "eth0".into(),
            },
            pod: PodMeta {
                namespace: "default".into(),
                name: "nginx".into(),
                ..Default::default()
            },
            ip: Some("10.0.0.9".parse().unwrap()),
            ipv6: None,
            egress_ipv4: None,
            eni_id: "eni-1".into(),
            device_number: 0,
            route_table: RT_TABLE_MAIN,
        };
        assert_eq!(allocation_veth_name("eni", &allocation), "enic440f455693");
        let anonymous = Allocation {
            pod: PodMeta::default(),
            ..allocation
        };
        assert_eq!(
            allocation_veth_name("eni", &anonymous),
            host_veth_name("eni", "", "", "abc", "eth0")
        );
    }
}
