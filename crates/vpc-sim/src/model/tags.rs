//! CreateTags and DeleteTags on every taggable resource the model holds.

use super::{Model, ModelError, Tags};

/// One `Tag.N` of DeleteTags: the key, and the value the tag must have to go (any when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagFilter {
    /// Tag key.
    pub key: String,
    /// Delete only when the tag has this value.
    pub value: Option<String>,
}

impl Model {
    /// Whether `id` names a resource that can carry tags, with EC2's error when it does not.
    fn check_taggable(&self, id: &str) -> Result<(), ModelError> {
        if id.starts_with("eni-") && !id.starts_with("eni-attach-") {
            self.eni(id).map(|_| ())
        } else if id.starts_with("i-") {
            self.instance(id).map(|_| ())
        } else if id.starts_with("subnet-") {
            self.subnet(id).map(|_| ())
        } else if id.starts_with("sg-") {
            self.security_group(id).map(|_| ())
        } else if id == self.vpc.id {
            Ok(())
        } else if id.starts_with("vpc-") {
            Err(ModelError::VpcNotFound(id.to_string()))
        } else {
            Err(ModelError::InvalidId(id.to_string()))
        }
    }

    /// The tags of a resource [`Model::check_taggable`] accepted.
    fn tags_mut(&mut self, id: &str) -> Result<&mut Tags, ModelError> {
        let tags = if self.enis.contains_key(id) {
            self.enis.get_mut(id).map(|e| &mut e.tags)
        } else if self.instances.contains_key(id) {
            self.instances.get_mut(id).map(|i| &mut i.tags)
        } else if self.subnets.contains_key(id) {
            self.subnets.get_mut(id).map(|s| &mut s.tags)
        } else if self.security_groups.contains_key(id) {
            self.security_groups.get_mut(id).map(|g| &mut g.tags)
        } else if id == self.vpc.id {
            Some(&mut self.vpc.tags)
        } else {
            None
        };
        tags.ok_or_else(|| ModelError::InvalidId(id.to_string()))
    }

    /// CreateTags on ENIs, instances, subnets, security groups or the VPC; checks every id
    /// before tagging any.
    pub fn create_tags(&mut self, ids: &[String], tags: &Tags) -> Result<(), ModelError> {
        for id in ids {
            self.check_taggable(id)?;
        }
        for id in ids {
            let target = self.tags_mut(id)?;
            target.extend(tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Ok(())
    }

    /// DeleteTags: removes the tags `which` names (a key, and optionally the value it must
    /// have), or every tag when `which` is empty; checks every id before touching any. A tag
    /// that is not there is no error, as in EC2.
    pub fn delete_tags(&mut self, ids: &[String], which: &[TagFilter]) -> Result<(), ModelError> {
        for id in ids {
            self.check_taggable(id)?;
        }
        for id in ids {
            let target = self.tags_mut(id)?;
            if which.is_empty() {
                target.clear();
            }
            for f in which {
                if f.value
                    .as_ref()
                    .is_none_or(|v| target.get(&f.key) == Some(v))
                {
                    target.remove(&f.key);
                }
            }
        }
        Ok(())
    }
}
