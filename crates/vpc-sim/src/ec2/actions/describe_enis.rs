//! DescribeNetworkInterfaces.

use cloud::Action;

use crate::ec2::filter::{Page, check_names, matches, tag_values};
use crate::ec2::params::Filter;
use crate::ec2::xml::Xml;
use crate::ec2::{Ctx, Ec2Error};
use crate::model::{Eni, Model, ModelError, well_formed};

use super::render::{EniShape, network_interface};

const FILTERS: &[&str] = &[
    "network-interface-id",
    "attachment.instance-id",
    "attachment.device-index",
    "attachment.status",
    "attachment.attachment-id",
    "attachment.delete-on-termination",
    "attachment.network-card-index",
    "status",
    "vpc-id",
    "subnet-id",
    "availability-zone",
    "description",
    "mac-address",
    "private-ip-address",
    "addresses.private-ip-address",
    "ipv6-addresses.ipv6-address",
    "group-id",
    "interface-type",
    "owner-id",
];

fn values(e: &Eni, name: &str) -> Vec<String> {
    if let Some(v) = tag_values(name, &e.tags) {
        return v;
    }
    let att = e.attachment.as_ref();
    let one = |v: Option<String>| v.into_iter().collect::<Vec<_>>();
    match name {
        "network-interface-id" => vec![e.id.clone()],
        "attachment.instance-id" => one(att.map(|a| a.instance_id.clone())),
        "attachment.device-index" => one(att.map(|a| a.device_index.to_string())),
        "attachment.status" => one(att.map(|a| a.status().to_string())),
        "attachment.attachment-id" => one(att.map(|a| a.id.clone())),
        "attachment.delete-on-termination" => one(att.map(|a| a.delete_on_termination.to_string())),
        "attachment.network-card-index" => one(att.map(|a| a.network_card_index.to_string())),
        "status" => vec![e.status.as_str().to_string()],
        "vpc-id" => vec![e.vpc_id.clone()],
        "subnet-id" => vec![e.subnet_id.clone()],
        "availability-zone" => vec![e.az.clone()],
        "description" => vec![e.description.clone()],
        "mac-address" => vec![e.mac.clone()],
        "private-ip-address" => vec![e.primary_ip.to_string()],
        "addresses.private-ip-address" => e.private_ips().map(|ip| ip.to_string()).collect(),
        "ipv6-addresses.ipv6-address" => e
            .ipv6_addresses
            .iter()
            .map(|a| a.value.to_string())
            .collect(),
        "group-id" => e.security_groups.clone(),
        "interface-type" => vec!["interface".into()],
        "owner-id" => vec![crate::model::ACCOUNT_ID.to_string()],
        _ => Vec::new(),
    }
}

/// The ENIs that pass DescribeNetworkInterfaces' `filters`, by id; a filter name EC2 does
/// not know is refused. The HTTP action and the in-process client both select with it.
pub(crate) fn select<'m>(m: &'m Model, filters: &[Filter]) -> Result<Vec<&'m Eni>, Ec2Error> {
    check_names(filters, FILTERS)?;
    Ok(m.enis()
        .filter(|e| matches(filters, |n| values(e, n)))
        .collect())
}

/// DescribeNetworkInterfaces: `NetworkInterfaceId.N` (an unknown id is an error naming it, as
/// in EC2), filters, MaxResults/NextToken.
pub fn describe(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let ids = cx.params.list("NetworkInterfaceId");
    let filters = cx.params.filters()?;
    let m = &*cx.model;
    // First, as EC2 refuses an unknown filter name before looking at anything else.
    let selected = select(m, &filters)?;
    let page = Page::from_params(cx.params, 5, 1000)?;
    if !ids.is_empty() && page.max_results.is_some() {
        return Err(Ec2Error::combination(
            "The parameter NetworkInterfaceIds cannot be used with the parameter MaxResults",
        ));
    }
    if let Some(bad) = ids.iter().find(|id| !well_formed(id, "eni")) {
        return Err(ModelError::EniMalformed(bad.clone()).into());
    }
    let missing: Vec<String> = ids
        .iter()
        .filter(|id| m.eni(id).is_err())
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(ModelError::EniNotFound(missing).into());
    }
    let chosen: Vec<&Eni> = selected
        .into_iter()
        .filter(|e| ids.is_empty() || ids.contains(&e.id))
        .collect();
    let (chosen, next) = page.apply(chosen, |e| e.id.clone());
    Ok(Xml::response(
        Action::DescribeNetworkInterfaces,
        cx.request_id,
        |x| {
            x.set("networkInterfaceSet", &chosen, |x, e| {
                network_interface(x, m, e, EniShape::Standalone);
            });
            x.leaf_opt("nextToken", next.as_ref());
        },
    ))
}
