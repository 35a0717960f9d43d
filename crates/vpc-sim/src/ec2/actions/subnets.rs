//! DescribeSubnets.

use cloud::Action;

use crate::ec2::filter::{Page, check_names, matches, tag_values};
use crate::ec2::params::Filter;
use crate::ec2::xml::Xml;
use crate::ec2::{Ctx, Ec2Error};
use crate::model::{Model, ModelError, Subnet, az_id};

const FILTERS: &[&str] = &[
    "subnet-id",
    "vpc-id",
    "availability-zone",
    "availability-zone-id",
    "cidr-block",
    "cidr",
    "cidrBlock",
    "state",
    "ipv6-cidr-block-association.ipv6-cidr-block",
    "ipv6-cidr-block-association.association-id",
    "ipv6-cidr-block-association.state",
];

fn values(m: &Model, s: &Subnet, name: &str) -> Vec<String> {
    if let Some(v) = tag_values(name, &s.tags) {
        return v;
    }
    match name {
        "subnet-id" => vec![s.id.clone()],
        "vpc-id" => vec![m.vpc().id.clone()],
        "availability-zone" => vec![s.az.clone()],
        "availability-zone-id" => vec![az_id(&s.az)],
        "cidr-block" | "cidr" | "cidrBlock" => vec![s.cidr.to_string()],
        "state" => vec!["available".into()],
        "ipv6-cidr-block-association.ipv6-cidr-block" => {
            s.ipv6.iter().map(|v| v.cidr.to_string()).collect()
        }
        "ipv6-cidr-block-association.association-id" => {
            s.ipv6.iter().map(|v| v.association_id.clone()).collect()
        }
        "ipv6-cidr-block-association.state" => {
            s.ipv6.iter().map(|_| "associated".to_string()).collect()
        }
        _ => Vec::new(),
    }
}

/// The subnets that pass DescribeSubnets' `filters`, in creation order; a filter name EC2
/// does not know is refused. The HTTP action and the in-process client both select with it.
pub(crate) fn select<'m>(m: &'m Model, filters: &[Filter]) -> Result<Vec<&'m Subnet>, Ec2Error> {
    check_names(filters, FILTERS)?;
    Ok(m.subnets()
        .into_iter()
        .filter(|s| matches(filters, |n| values(m, s, n)))
        .collect())
}

/// DescribeSubnets: `SubnetId.N`, filters, pagination.
pub fn describe(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let ids = cx.params.list("SubnetId");
    let filters = cx.params.filters()?;
    let m = &*cx.model;
    // First, as EC2 refuses an unknown filter name before looking at anything else.
    let selected = select(m, &filters)?;
    let page = Page::from_params(cx.params, 5, 1000)?;
    let missing: Vec<String> = ids
        .iter()
        .filter(|id| m.subnet(id).is_err())
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(ModelError::SubnetNotFound(missing).into());
    }
    let chosen: Vec<&Subnet> = selected
        .into_iter()
        .filter(|s| ids.is_empty() || ids.contains(&s.id))
        .collect();
    let (chosen, next) = page.apply(chosen, |s| s.id.clone());
    let vpc = m.vpc();
    Ok(Xml::response(Action::DescribeSubnets, cx.request_id, |x| {
        x.set("subnetSet", &chosen, |x, s| {
            x.leaf("subnetId", &s.id)
                .leaf(
                    "subnetArn",
                    format!(
                        "arn:aws:ec2:{}:{}:subnet/{}",
                        vpc.region, vpc.owner_id, s.id
                    ),
                )
                .leaf("state", "available")
                .leaf("ownerId", &vpc.owner_id)
                .leaf("vpcId", &vpc.id)
                .leaf("cidrBlock", s.cidr)
                .set("ipv6CidrBlockAssociationSet", &s.ipv6, |x, v6| {
                    x.leaf("associationId", &v6.association_id)
                        .leaf("ipv6CidrBlock", v6.cidr);
                    x.node("ipv6CidrBlockState", |x| {
                        x.leaf("state", "associated");
                    });
                    x.leaf("ipv6AddressAttribute", "public")
                        .leaf("ipSource", "amazon");
                })
                .leaf("availableIpAddressCount", s.available_ip_address_count())
                .leaf("availabilityZone", &s.az)
                .leaf("availabilityZoneId", az_id(&s.az))
                .leaf("defaultForAz", false)
                .leaf("mapPublicIpOnLaunch", false)
                .leaf("assignIpv6AddressOnCreation", s.assign_ipv6_on_creation())
                .tags(&s.tags);
        });
        x.leaf_opt("nextToken", next.as_ref());
    }))
}
