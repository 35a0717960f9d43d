//! DescribeInstanceTypes (network facts only).

use cloud::Action;

use std::collections::BTreeSet;

use cloud::limits::InstanceLimits;

use crate::ec2::filter::{Page, matches};
use crate::ec2::xml::Xml;
use crate::ec2::{Ctx, Ec2Error};
use crate::model::{ModelError, ipv6_per_eni};

/// DescribeInstanceTypes: `InstanceType.N` from the instance table. Without names it lists the
/// types in use and the extra types (the embedded table cannot be enumerated).
pub fn describe(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let names = cx.params.list("InstanceType");
    let filters = cx.params.filters()?;
    if let Some(f) = filters.iter().find(|f| f.name != "instance-type") {
        return Err(Ec2Error::invalid(format!(
            "The filter '{}' is invalid",
            f.name
        )));
    }
    let page = Page::from_params(cx.params, 5, 100)?;
    let m = &*cx.model;
    let unknown: Vec<String> = names
        .iter()
        .filter(|n| m.limits(n).is_err())
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(ModelError::UnknownInstanceType(unknown).into());
    }
    let chosen: BTreeSet<String> = if names.is_empty() {
        m.instances()
            .iter()
            .map(|i| i.instance_type.clone())
            .chain(m.extra_types().map(str::to_string))
            .collect()
    } else {
        names.into_iter().collect()
    };
    let mut rows: Vec<(String, InstanceLimits)> = Vec::new();
    for name in chosen {
        let limits = m.limits(&name)?;
        if matches(&filters, |_| vec![name.clone()]) {
            rows.push((name, limits));
        }
    }
    let (rows, next) = page.apply(rows, |(n, _)| n.clone());
    Ok(Xml::response(
        Action::DescribeInstanceTypes,
        cx.request_id,
        |x| {
            x.set("instanceTypeSet", &rows, |x, (name, l)| {
                instance_type(x, name, l)
            });
            x.leaf_opt("nextToken", next.as_ref());
        },
    ))
}

fn instance_type(x: &mut Xml, name: &str, l: &InstanceLimits) {
    x.leaf("instanceType", name)
        .leaf("currentGeneration", true)
        .leaf("bareMetal", l.bare_metal);
    if l.nitro {
        x.leaf("hypervisor", "nitro");
    } else if !l.bare_metal {
        x.leaf("hypervisor", "xen");
    }
    let cards = l.network_cards.max(1);
    x.node("networkInfo", |x| {
        x.leaf("networkPerformance", "Up to 5 Gigabit")
            // As EC2: the instance total; each card carries the per-card figure.
            .leaf("maximumNetworkInterfaces", l.max_enis * cards)
            .leaf("maximumNetworkCards", cards)
            .leaf("defaultNetworkCardIndex", 0);
        x.set("networkCards", 0..cards, |x, i| {
            x.leaf("networkCardIndex", i)
                .leaf("networkPerformance", "Up to 5 Gigabit")
                .leaf("maximumNetworkInterfaces", l.max_enis);
        });
        let v6 = ipv6_per_eni(name, l);
        x.leaf("ipv4AddressesPerInterface", l.ipv4_per_eni)
            .leaf("ipv6AddressesPerInterface", v6)
            .leaf("ipv6Supported", v6 > 0)
            .leaf("enaSupport", if l.nitro { "required" } else { "supported" })
            .leaf("efaSupported", false)
            .leaf("encryptionInTransitSupported", false);
    });
}
