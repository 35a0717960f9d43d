//! Security groups: the VPC's default one and those created later. Only their identity is
//! modelled (ids, names, which ENIs carry them); the fabric filters no traffic by them.

use super::{Model, ModelError, SecurityGroup, Tags, well_formed};

/// Longest group name or description EC2 accepts.
const MAX_TEXT: usize = 255;

impl Model {
    /// CreateSecurityGroup: a group named `name`, unique in the VPC, in VPC `vpc_id`.
    pub fn create_security_group(
        &mut self,
        name: &str,
        description: &str,
        vpc_id: &str,
        tags: Tags,
    ) -> Result<SecurityGroup, ModelError> {
        if vpc_id != self.vpc.id {
            return Err(ModelError::VpcNotFound(vpc_id.to_string()));
        }
        if name.starts_with("sg-") {
            return Err(ModelError::invalid(
                "Group names may not be in the format sg-*.",
            ));
        }
        for (what, text) in [("name", name), ("description", description)] {
            if text.is_empty() || text.len() > MAX_TEXT {
                return Err(ModelError::invalid(format!(
                    "Invalid group {what} {text:?}: it must be 1 to {MAX_TEXT} characters."
                )));
            }
        }
        if self.security_groups.values().any(|g| g.name == name) {
            return Err(ModelError::GroupDuplicate {
                name: name.to_string(),
                vpc_id: vpc_id.to_string(),
            });
        }
        let group = SecurityGroup {
            id: self.ids.id("sg"),
            name: name.to_string(),
            description: description.to_string(),
            vpc_id: vpc_id.to_string(),
            tags,
        };
        self.security_groups.insert(group.id.clone(), group.clone());
        Ok(group)
    }

    /// Every security group, by id.
    pub fn security_groups(&self) -> impl Iterator<Item = &SecurityGroup> {
        self.security_groups.values()
    }

    /// A security group by id (`InvalidGroupId.Malformed` / `InvalidGroup.NotFound` otherwise).
    pub fn security_group(&self, id: &str) -> Result<&SecurityGroup, ModelError> {
        if !well_formed(id, "sg") {
            return Err(ModelError::GroupMalformed(id.to_string()));
        }
        self.security_groups
            .get(id)
            .ok_or_else(|| ModelError::GroupNotFound(id.to_string()))
    }

    /// The name of group `id`, as EC2 shows it next to the id (empty for an unknown id).
    pub fn group_name(&self, id: &str) -> &str {
        self.security_groups.get(id).map_or("", |g| g.name.as_str())
    }

    /// The groups an ENI is given: each must exist; empty means the VPC's default group.
    /// Repeats are dropped, the order kept.
    pub(super) fn check_groups(&self, groups: &[String]) -> Result<Vec<String>, ModelError> {
        if groups.is_empty() {
            return Ok(vec![self.vpc.default_security_group.clone()]);
        }
        let mut out: Vec<String> = Vec::with_capacity(groups.len());
        for g in groups {
            self.security_group(g)?;
            if !out.contains(g) {
                out.push(g.clone());
            }
        }
        Ok(out)
    }
}
