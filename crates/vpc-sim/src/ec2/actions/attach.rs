//! AttachNetworkInterface, DetachNetworkInterface.

use cloud::Action;

use crate::ec2::xml::Xml;
use crate::ec2::{Ctx, Ec2Error, ok_return};

/// AttachNetworkInterface.
pub fn attach(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let p = cx.params;
    let eni = p.required("NetworkInterfaceId")?;
    let instance = p.required("InstanceId")?;
    p.required("DeviceIndex")?;
    let device = p.parsed::<u32>("DeviceIndex")?.unwrap_or_default();
    let card = p.parsed::<u32>("NetworkCardIndex")?.unwrap_or(0);
    let attachment = cx
        .model
        .attach_eni(eni, instance, device, card, cx.now_ms)?;
    Ok(Xml::response(
        Action::AttachNetworkInterface,
        cx.request_id,
        |x| {
            x.leaf("attachmentId", &attachment)
                .leaf("networkCardIndex", card);
        },
    ))
}

/// DetachNetworkInterface.
pub fn detach(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let p = cx.params;
    let attachment = p.required("AttachmentId")?;
    let force = p.bool("Force")?.unwrap_or(false);
    cx.model.detach_eni(attachment, force)?;
    Ok(ok_return(Action::DetachNetworkInterface, cx.request_id))
}
