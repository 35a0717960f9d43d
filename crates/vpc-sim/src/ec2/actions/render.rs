//! XML of resources shared by several actions.

use crate::clock::rfc3339_millis;
use crate::ec2::xml::Xml;
use crate::model::{Eni, Model, private_dns_name};

/// Which EC2 shape an ENI is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EniShape {
    /// `NetworkInterface` (DescribeNetworkInterfaces, CreateNetworkInterface).
    Standalone,
    /// `InstanceNetworkInterface` (DescribeInstances' networkInterfaceSet).
    InInstance,
}

/// `<groupSet>` of the given security group ids, with their names.
pub fn group_set(x: &mut Xml, m: &Model, groups: &[String]) {
    x.set("groupSet", groups, |x, g| {
        x.leaf("groupId", g).leaf("groupName", m.group_name(g));
    });
}

/// The children of an ENI element (the caller writes `<item>` or `<networkInterface>`).
pub fn network_interface(x: &mut Xml, m: &Model, eni: &Eni, shape: EniShape) {
    let region = &m.vpc().region;
    x.leaf("networkInterfaceId", &eni.id)
        .leaf("subnetId", &eni.subnet_id)
        .leaf("vpcId", &eni.vpc_id);
    if shape == EniShape::Standalone {
        x.leaf("availabilityZone", &eni.az)
            .leaf("availabilityZoneId", crate::model::az_id(&eni.az));
    }
    x.leaf("description", &eni.description)
        .leaf("ownerId", &m.vpc().owner_id);
    if shape == EniShape::Standalone {
        x.leaf("requesterManaged", false);
    }
    x.leaf("status", eni.status.as_str())
        .leaf("macAddress", &eni.mac)
        .leaf("privateIpAddress", eni.primary_ip)
        .leaf("privateDnsName", private_dns_name(region, eni.primary_ip))
        .leaf("sourceDestCheck", true);
    group_set(x, m, &eni.security_groups);
    if let Some(a) = &eni.attachment {
        x.node("attachment", |x| {
            x.leaf("attachmentId", &a.id);
            if shape == EniShape::Standalone {
                x.leaf("instanceId", &a.instance_id)
                    .leaf("instanceOwnerId", &m.vpc().owner_id);
            }
            x.leaf("deviceIndex", a.device_index)
                .leaf("networkCardIndex", a.network_card_index)
                .leaf("status", a.status())
                .leaf("attachTime", rfc3339_millis(a.attached_ms))
                .leaf("deleteOnTermination", a.delete_on_termination);
        });
    }
    if shape == EniShape::Standalone {
        x.tags(&eni.tags);
    }
    let primary = eni.primary_ip;
    x.set("privateIpAddressesSet", eni.private_ips(), |x, ip| {
        x.leaf("privateIpAddress", ip)
            .leaf("privateDnsName", private_dns_name(region, ip))
            .leaf("primary", ip == primary);
    });
    x.set("ipv4PrefixSet", &eni.prefixes, |x, p| {
        x.leaf("ipv4Prefix", p.value);
    });
    x.set("ipv6AddressesSet", &eni.ipv6_addresses, |x, a| {
        // The simulator models no "primary IPv6" (EnablePrimaryIpv6), as the CNI uses none.
        x.leaf("ipv6Address", a.value).leaf("isPrimaryIpv6", false);
    });
    // Only when there is one, so an IPv4-only ENI is written exactly as before IPv6 existed.
    if !eni.ipv6_prefixes.is_empty() {
        x.set("ipv6PrefixSet", &eni.ipv6_prefixes, |x, p| {
            x.leaf("ipv6Prefix", p.value);
        });
    }
    x.leaf("interfaceType", "interface");
}
