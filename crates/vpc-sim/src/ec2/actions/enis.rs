//! CreateNetworkInterface, DeleteNetworkInterface, ModifyNetworkInterfaceAttribute.

use cloud::Action;

use std::net::Ipv4Addr;

use crate::ec2::xml::Xml;
use crate::ec2::{Ctx, Ec2Error, ok_return};
use crate::model::{CreateEni, EniChange};

use super::render::{EniShape, network_interface};

/// Parameters CreateNetworkInterface accepts in EC2 that the simulator does not model; refusing
/// them beats silently ignoring them.
const UNSUPPORTED: &[&str] = &[
    "PrivateIpAddresses",
    "Ipv4Prefix",
    "Ipv6Addresses",
    "Ipv6Prefix",
    "Ipv6PrefixCount",
    "InterfaceType",
];

/// CreateNetworkInterface.
pub fn create(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let p = cx.params;
    if let Some(name) = UNSUPPORTED.iter().find(|n| p.has(n)) {
        return Err(Ec2Error::invalid(format!(
            "The parameter {name} is not supported by vpc-sim."
        )));
    }
    let tags = p.tags_for("network-interface")?;
    let req = CreateEni {
        subnet_id: p.required("SubnetId")?.to_string(),
        description: p.get("Description").unwrap_or_default().to_string(),
        security_groups: p.list("SecurityGroupId"),
        primary_ip: p.parsed::<Ipv4Addr>("PrivateIpAddress")?,
        secondary_count: p.parsed("SecondaryPrivateIpAddressCount")?.unwrap_or(0),
        prefix_count: p.parsed("Ipv4PrefixCount")?.unwrap_or(0),
        ipv6_address_count: p.parsed("Ipv6AddressCount")?,
        tags,
        client_token: p.get("ClientToken").map(str::to_string),
    };
    let now = cx.now_ms;
    let eni = cx.model.create_eni(req, now)?;
    let m = &*cx.model;
    Ok(Xml::response(
        Action::CreateNetworkInterface,
        cx.request_id,
        |x| {
            x.node("networkInterface", |x| {
                network_interface(x, m, &eni, EniShape::Standalone);
            });
            x.leaf_opt("clientToken", p.get("ClientToken"));
        },
    ))
}

/// DeleteNetworkInterface.
pub fn delete(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let id = cx.params.required("NetworkInterfaceId")?;
    cx.model.delete_eni(id)?;
    Ok(ok_return(Action::DeleteNetworkInterface, cx.request_id))
}

/// ModifyNetworkInterfaceAttribute: exactly one of Attachment, Description, SecurityGroupId.
pub fn modify(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let p = cx.params;
    let id = p.required("NetworkInterfaceId")?;
    if p.has("SourceDestCheck") {
        return Err(Ec2Error::invalid(
            "The attribute SourceDestCheck is not supported by vpc-sim yet.",
        ));
    }
    let mut changes = Vec::new();
    if p.has("Attachment") {
        let attachment_id = p.required("Attachment.AttachmentId")?.to_string();
        let value = p
            .bool("Attachment.DeleteOnTermination")?
            .ok_or_else(|| Ec2Error::missing("Attachment.DeleteOnTermination"))?;
        changes.push(EniChange::DeleteOnTermination {
            attachment_id,
            value,
        });
    }
    if p.has("Description") {
        changes.push(EniChange::Description(
            p.get("Description.Value").unwrap_or_default().to_string(),
        ));
    }
    if p.has("SecurityGroupId") {
        changes.push(EniChange::SecurityGroups(p.list("SecurityGroupId")));
    }
    let change = match changes.len() {
        0 => return Err(Ec2Error::combination("No attributes specified.")),
        1 => changes.remove(0),
        _ => {
            return Err(Ec2Error::combination(
                "Fields for multiple attribute types specified: specify one attribute per request.",
            ));
        }
    };
    cx.model.modify_eni(id, change)?;
    Ok(ok_return(
        Action::ModifyNetworkInterfaceAttribute,
        cx.request_id,
    ))
}
