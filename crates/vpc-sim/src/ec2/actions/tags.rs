//! CreateTags.

use crate::ec2::{Ctx, Ec2Error, ok_return};

/// CreateTags: `ResourceId.N` + `Tag.N.Key/Value`.
pub fn create(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let ids = cx.params.list("ResourceId");
    if ids.is_empty() {
        return Err(Ec2Error::missing("ResourceId.1"));
    }
    let tags = cx.params.tags("Tag")?;
    if tags.is_empty() {
        return Err(Ec2Error::missing("Tag.1.Key"));
    }
    cx.model.create_tags(&ids, &tags)?;
    Ok(ok_return("CreateTags", cx.request_id))
}
