//! CreateTags, DeleteTags.

use cloud::Action;

use crate::ec2::{Ctx, Ec2Error, ok_return};
use crate::model::TagFilter;

/// `ResourceId.N`, at least one.
fn resource_ids(cx: &Ctx<'_>) -> Result<Vec<String>, Ec2Error> {
    let ids = cx.params.list("ResourceId");
    if ids.is_empty() {
        return Err(Ec2Error::missing("ResourceId.1"));
    }
    Ok(ids)
}

/// CreateTags: `ResourceId.N` + `Tag.N.Key/Value`.
pub fn create(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let ids = resource_ids(cx)?;
    let tags = cx.params.tags("Tag")?;
    if tags.is_empty() {
        return Err(Ec2Error::missing("Tag.1.Key"));
    }
    cx.model.create_tags(&ids, &tags)?;
    Ok(ok_return(Action::CreateTags, cx.request_id))
}

/// DeleteTags: `ResourceId.N` + `Tag.N.Key` with an optional `Tag.N.Value` (the tag goes only
/// when it has that value, an empty one included); no `Tag` at all removes every tag.
pub fn delete(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let ids = resource_ids(cx)?;
    let p = cx.params;
    let which = p
        .indices("Tag")
        .into_iter()
        .map(|n| {
            Ok(TagFilter {
                key: p.required(&format!("Tag.{n}.Key"))?.to_string(),
                value: p.get(&format!("Tag.{n}.Value")).map(str::to_string),
            })
        })
        .collect::<Result<Vec<_>, Ec2Error>>()?;
    cx.model.delete_tags(&ids, &which)?;
    Ok(ok_return(Action::DeleteTags, cx.request_id))
}
