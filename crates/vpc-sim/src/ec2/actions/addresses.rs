//! AssignPrivateIpAddresses, UnassignPrivateIpAddresses.

use cloud::Action;

use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;

use crate::ec2::xml::Xml;
use crate::ec2::{Ctx, Ec2Error, ok_return};
use crate::model::AssignRequest;

/// AssignPrivateIpAddresses: one of SecondaryPrivateIpAddressCount, PrivateIpAddress.N,
/// Ipv4PrefixCount, Ipv4Prefix.N. The reply lists only what was newly assigned.
pub fn assign(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let p = cx.params;
    let eni = p.required("NetworkInterfaceId")?;
    let mut forms = Vec::new();
    if let Some(n) = p.parsed::<u32>("SecondaryPrivateIpAddressCount")? {
        forms.push(AssignRequest::Count(n));
    }
    if p.has("PrivateIpAddress") {
        forms.push(AssignRequest::Addresses(
            p.parsed_list::<Ipv4Addr>("PrivateIpAddress")?,
        ));
    }
    if let Some(n) = p.parsed::<u32>("Ipv4PrefixCount")? {
        forms.push(AssignRequest::PrefixCount(n));
    }
    if p.has("Ipv4Prefix") {
        forms.push(AssignRequest::Prefixes(
            p.parsed_list::<Ipv4Network>("Ipv4Prefix")?,
        ));
    }
    let req = match forms.len() {
        0 => {
            return Err(Ec2Error::missing(
                "SecondaryPrivateIpAddressCount, PrivateIpAddress, Ipv4PrefixCount or Ipv4Prefix",
            ));
        }
        1 => forms.remove(0),
        _ => {
            return Err(Ec2Error::combination(
                "Specify only one of SecondaryPrivateIpAddressCount, PrivateIpAddress, Ipv4PrefixCount and Ipv4Prefix.",
            ));
        }
    };
    let got = cx.model.assign_private_ips(eni, req, cx.now_ms)?;
    Ok(Xml::response(
        Action::AssignPrivateIpAddresses,
        cx.request_id,
        |x| {
            x.leaf("networkInterfaceId", eni);
            x.set("assignedPrivateIpAddressesSet", &got.ips, |x, ip| {
                x.leaf("privateIpAddress", ip);
            });
            x.set("assignedIpv4PrefixSet", &got.prefixes, |x, pfx| {
                x.leaf("ipv4Prefix", pfx);
            });
        },
    ))
}

/// UnassignPrivateIpAddresses: PrivateIpAddress.N and/or Ipv4Prefix.N.
pub fn unassign(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let p = cx.params;
    let eni = p.required("NetworkInterfaceId")?;
    let ips = p.parsed_list::<Ipv4Addr>("PrivateIpAddress")?;
    let prefixes = p.parsed_list::<Ipv4Network>("Ipv4Prefix")?;
    if ips.is_empty() && prefixes.is_empty() {
        return Err(Ec2Error::missing("PrivateIpAddress or Ipv4Prefix"));
    }
    cx.model.unassign_private_ips(eni, &ips, &prefixes)?;
    Ok(ok_return(Action::UnassignPrivateIpAddresses, cx.request_id))
}
