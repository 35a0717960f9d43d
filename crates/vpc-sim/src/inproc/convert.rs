//! The model's ENIs and subnets as the cloud seam's types.

use cloud::{Attachment, EniFilter, NetworkInterface, Subnet};

use crate::ec2::params::Filter;
use crate::model::{self, Model};

/// An ENI as DescribeNetworkInterfaces shows it.
pub(super) fn interface(model: &Model, eni: &model::Eni) -> NetworkInterface {
    NetworkInterface {
        id: eni.id.clone(),
        mac: eni.mac.clone(),
        subnet_id: eni.subnet_id.clone(),
        vpc_id: model.vpc().id.clone(),
        description: eni.description.clone(),
        status: eni.status.as_str().to_string(),
        primary_ip: Some(eni.primary_ip),
        secondary_ips: eni.secondary_ips.iter().map(|s| s.value).collect(),
        prefixes: eni.prefixes.iter().map(|s| s.value).collect(),
        ipv6_addresses: eni.ipv6_addresses.iter().map(|s| s.value).collect(),
        ipv6_prefixes: eni.ipv6_prefixes.iter().map(|s| s.value).collect(),
        attachment: eni.attachment.as_ref().map(|a| Attachment {
            id: a.id.clone(),
            instance_id: Some(a.instance_id.clone()),
            device_index: a.device_index,
            network_card_index: a.network_card_index,
            delete_on_termination: a.delete_on_termination,
        }),
        security_groups: eni.security_groups.clone(),
        tags: eni.tags.clone(),
    }
}

/// A subnet as DescribeSubnets shows it.
pub(super) fn subnet(model: &Model, s: &model::Subnet) -> Subnet {
    Subnet {
        id: s.id.clone(),
        cidr: s.cidr,
        ipv6_cidr: s.ipv6_cidr(),
        availability_zone: s.az.clone(),
        vpc_id: model.vpc().id.clone(),
        available_ips: s.available_ip_address_count(),
        tags: s.tags.clone(),
    }
}

/// The seam's filters as the EC2 API's, so both select with the same code.
pub(super) fn filters(filters: &[EniFilter]) -> Vec<Filter> {
    filters
        .iter()
        .map(|f| Filter {
            name: f.name.clone(),
            values: f.values.clone(),
        })
        .collect()
}
