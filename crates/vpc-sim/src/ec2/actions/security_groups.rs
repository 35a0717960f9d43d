//! CreateSecurityGroup, DescribeSecurityGroups.

use cloud::Action;

use crate::ec2::filter::{Page, check_names, matches, tag_values};
use crate::ec2::xml::Xml;
use crate::ec2::{Ctx, Ec2Error};
use crate::model::{Model, ModelError, SecurityGroup};

const FILTERS: &[&str] = &[
    "group-id",
    "group-name",
    "vpc-id",
    "description",
    "owner-id",
];

fn values(g: &SecurityGroup, name: &str) -> Vec<String> {
    if let Some(v) = tag_values(name, &g.tags) {
        return v;
    }
    match name {
        "group-id" => vec![g.id.clone()],
        "group-name" => vec![g.name.clone()],
        "vpc-id" => vec![g.vpc_id.clone()],
        "description" => vec![g.description.clone()],
        "owner-id" => vec![crate::model::ACCOUNT_ID.to_string()],
        _ => Vec::new(),
    }
}

fn arn(m: &Model, id: &str) -> String {
    let vpc = m.vpc();
    format!(
        "arn:aws:ec2:{}:{}:security-group/{id}",
        vpc.region, vpc.owner_id
    )
}

/// CreateSecurityGroup: `GroupName`, `GroupDescription`, `VpcId` (the VPC is no default VPC,
/// so it is required, as EC2 requires it then), `TagSpecification.N`.
pub fn create(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let p = cx.params;
    let name = p.required("GroupName")?;
    let description = p.required("GroupDescription")?;
    let vpc_id = p
        .get("VpcId")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Ec2Error::new("VPCIdNotSpecified", "No default VPC for this user"))?;
    let tags = p.tags_for("security-group")?;
    let g = cx
        .model
        .create_security_group(name, description, vpc_id, tags)?;
    let m = &*cx.model;
    Ok(Xml::response(
        Action::CreateSecurityGroup,
        cx.request_id,
        |x| {
            x.leaf("return", true)
                .leaf("groupId", &g.id)
                .leaf("securityGroupArn", arn(m, &g.id))
                .tags(&g.tags);
        },
    ))
}

/// DescribeSecurityGroups: `GroupId.N`, `GroupName.N` (an unknown one is an error naming it),
/// filters, MaxResults/NextToken. No rules are modelled: both permission sets are empty.
pub fn describe(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    let p = cx.params;
    let (ids, names) = (p.list("GroupId"), p.list("GroupName"));
    let filters = p.filters()?;
    check_names(&filters, FILTERS)?;
    let page = Page::from_params(p, 5, 1000)?;
    if !(ids.is_empty() && names.is_empty()) && page.max_results.is_some() {
        return Err(Ec2Error::combination(
            "The parameter GroupIds or GroupNames cannot be used with the parameter MaxResults",
        ));
    }
    let m = &*cx.model;
    for id in &ids {
        m.security_group(id)?;
    }
    if let Some(name) = names
        .iter()
        .find(|n| !m.security_groups().any(|g| g.name == **n))
    {
        return Err(ModelError::GroupNotFound(name.clone()).into());
    }
    let chosen: Vec<&SecurityGroup> = m
        .security_groups()
        .filter(|g| ids.is_empty() || ids.contains(&g.id))
        .filter(|g| names.is_empty() || names.contains(&g.name))
        .filter(|g| matches(&filters, |n| values(g, n)))
        .collect();
    let (chosen, next) = page.apply(chosen, |g| g.id.clone());
    Ok(Xml::response(
        Action::DescribeSecurityGroups,
        cx.request_id,
        |x| {
            x.set("securityGroupInfo", &chosen, |x, g| {
                x.leaf("ownerId", &m.vpc().owner_id)
                    .leaf("groupId", &g.id)
                    .leaf("groupName", &g.name)
                    .leaf("groupDescription", &g.description)
                    .leaf("vpcId", &g.vpc_id)
                    .leaf("securityGroupArn", arn(m, &g.id))
                    .set("ipPermissions", std::iter::empty::<()>(), |_, _| {})
                    .set("ipPermissionsEgress", std::iter::empty::<()>(), |_, _| {})
                    .tags(&g.tags);
            });
            x.leaf_opt("nextToken", next.as_ref());
        },
    ))
}
