//! AssignIpv6Addresses, UnassignIpv6Addresses.

use cloud::Action;

use std::net::Ipv6Addr;

use ipnetwork::Ipv6Network;

use crate::ec2::xml::Xml;
use crate::ec2::{Ctx, Ec2Error};
use crate::model::Assign6Request;

/// AssignIpv6Addresses: one of Ipv6AddressCount, Ipv6Addresses.N, Ipv6PrefixCount,
/// Ipv6Prefix.N (the SDK's wire names). The reply lists only what was newly assigned.
pub fn assign(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let p = cx.params;
    let eni = p.required("NetworkInterfaceId")?;
    let mut forms = Vec::new();
    if let Some(n) = p.parsed::<u32>("Ipv6AddressCount")? {
        forms.push(Assign6Request::Count(n));
    }
    if p.has("Ipv6Addresses") {
        forms.push(Assign6Request::Addresses(
            p.parsed_list::<Ipv6Addr>("Ipv6Addresses")?,
        ));
    }
    if let Some(n) = p.parsed::<u32>("Ipv6PrefixCount")? {
        forms.push(Assign6Request::PrefixCount(n));
    }
    if p.has("Ipv6Prefix") {
        forms.push(Assign6Request::Prefixes(
            p.parsed_list::<Ipv6Network>("Ipv6Prefix")?,
        ));
    }
    let req = match forms.len() {
        0 => {
            return Err(Ec2Error::missing(
                "Ipv6AddressCount, Ipv6Addresses, Ipv6PrefixCount or Ipv6Prefix",
            ));
        }
        1 => forms.remove(0),
        _ => {
            return Err(Ec2Error::combination(
                "Specify only one of Ipv6AddressCount, Ipv6Addresses, Ipv6PrefixCount and Ipv6Prefix.",
            ));
        }
    };
    let got = cx.model.assign_ipv6(eni, req, cx.now_ms)?;
    Ok(Xml::response(
        Action::AssignIpv6Addresses,
        cx.request_id,
        |x| {
            x.set("assignedIpv6Addresses", &got.addresses, |x, ip| {
                x.text(ip);
            });
            x.set("assignedIpv6PrefixSet", &got.prefixes, |x, pfx| {
                x.text(pfx);
            });
            x.leaf("networkInterfaceId", eni);
        },
    ))
}

/// UnassignIpv6Addresses: Ipv6Addresses.N and/or Ipv6Prefix.N; the reply lists what went.
pub fn unassign(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let p = cx.params;
    let eni = p.required("NetworkInterfaceId")?;
    let addresses = p.parsed_list::<Ipv6Addr>("Ipv6Addresses")?;
    let prefixes = p.parsed_list::<Ipv6Network>("Ipv6Prefix")?;
    if addresses.is_empty() && prefixes.is_empty() {
        return Err(Ec2Error::missing("Ipv6Addresses or Ipv6Prefix"));
    }
    let gone = cx.model.unassign_ipv6(eni, &addresses, &prefixes)?;
    Ok(Xml::response(
        Action::UnassignIpv6Addresses,
        cx.request_id,
        |x| {
            x.leaf("networkInterfaceId", eni);
            x.set("unassignedIpv6Addresses", &gone.addresses, |x, ip| {
                x.text(ip);
            });
            x.set("unassignedIpv6PrefixSet", &gone.prefixes, |x, pfx| {
                x.text(pfx);
            });
        },
    ))
}
