//! DescribeInstances.

use cloud::Action;

use crate::clock::rfc3339_millis;
use crate::ec2::filter::{Page, check_names, matches, tag_values};
use crate::ec2::xml::Xml;
use crate::ec2::{Ctx, Ec2Error};
use crate::model::{Instance, Model, ModelError, private_dns_name, well_formed};

use super::render::{EniShape, group_set, network_interface};

const FILTERS: &[&str] = &[
    "instance-id",
    "instance-type",
    "availability-zone",
    "vpc-id",
    "subnet-id",
    "private-ip-address",
    "instance-state-name",
    "network-interface.network-interface-id",
];

fn values(m: &Model, i: &Instance, name: &str) -> Vec<String> {
    if let Some(v) = tag_values(name, &i.tags) {
        return v;
    }
    let enis = m.enis_of(&i.id);
    match name {
        "instance-id" => vec![i.id.clone()],
        "instance-type" => vec![i.instance_type.clone()],
        "availability-zone" => vec![i.az.clone()],
        "vpc-id" => vec![m.vpc().id.clone()],
        "subnet-id" => vec![i.subnet_id.clone()],
        "instance-state-name" => vec!["running".into()],
        "private-ip-address" => m
            .eni(&i.primary_eni)
            .map(|e| vec![e.primary_ip.to_string()])
            .unwrap_or_default(),
        "network-interface.network-interface-id" => enis.iter().map(|e| e.id.clone()).collect(),
        _ => Vec::new(),
    }
}

/// DescribeInstances: `InstanceId.N`, filters, pagination; one reservation per instance.
pub fn describe(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let ids = cx.params.list("InstanceId");
    let filters = cx.params.filters()?;
    check_names(&filters, FILTERS)?;
    let page = Page::from_params(cx.params, 5, 1000)?;
    let m = &*cx.model;
    if let Some(bad) = ids.iter().find(|id| !well_formed(id, "i")) {
        return Err(ModelError::InstanceMalformed(bad.clone()).into());
    }
    let missing: Vec<String> = ids
        .iter()
        .filter(|id| m.instance(id).is_err())
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(ModelError::InstanceNotFound(missing).into());
    }
    let chosen: Vec<&Instance> = m
        .instances()
        .into_iter()
        .filter(|i| ids.is_empty() || ids.contains(&i.id))
        .filter(|i| matches(&filters, |n| values(m, i, n)))
        .collect();
    let (chosen, next) = page.apply(chosen, |i| i.id.clone());
    Ok(Xml::response(
        Action::DescribeInstances,
        cx.request_id,
        |x| {
            x.set("reservationSet", &chosen, |x, i| reservation(x, m, i));
            x.leaf_opt("nextToken", next.as_ref());
        },
    ))
}

fn reservation(x: &mut Xml, m: &Model, i: &Instance) {
    let region = &m.vpc().region;
    let primary = m.eni(&i.primary_eni).ok();
    x.leaf(
        "reservationId",
        format!("r-{}", i.id.trim_start_matches("i-")),
    )
    .leaf("ownerId", &m.vpc().owner_id);
    group_set(x, m, &[]);
    x.set("instancesSet", [i], |x, i| {
        x.leaf("instanceId", &i.id).leaf("imageId", &i.image_id);
        x.node("instanceState", |x| {
            x.leaf("code", 16).leaf("name", "running");
        });
        x.leaf_opt(
            "privateDnsName",
            primary.map(|e| private_dns_name(region, e.primary_ip)),
        )
        .leaf("dnsName", "")
        .leaf("amiLaunchIndex", 0)
        .leaf("instanceType", &i.instance_type)
        .leaf("launchTime", rfc3339_millis(i.launched_ms));
        x.node("placement", |x| {
            x.leaf("availabilityZone", &i.az)
                .leaf("groupName", "")
                .leaf("tenancy", "default");
        });
        x.node("monitoring", |x| {
            x.leaf("state", "disabled");
        });
        x.leaf("subnetId", &i.subnet_id)
            .leaf("vpcId", &m.vpc().id)
            .leaf_opt("privateIpAddress", primary.map(|e| e.primary_ip))
            .leaf("sourceDestCheck", true);
        group_set(
            x,
            m,
            primary
                .map(|e| e.security_groups.as_slice())
                .unwrap_or_default(),
        );
        x.leaf("architecture", "x86_64")
            .leaf("rootDeviceType", "ebs")
            .leaf("rootDeviceName", "/dev/xvda")
            .leaf("virtualizationType", "hvm")
            .leaf("hypervisor", "xen")
            .tags(&i.tags);
        x.set("networkInterfaceSet", m.enis_of(&i.id), |x, eni| {
            network_interface(x, m, eni, EniShape::InInstance);
        });
        x.leaf("ebsOptimized", false).leaf("enaSupport", true);
    });
}
