//! Create, delete, modify and tag ENIs.

use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;

use super::alloc::{AddressSpace, TakeError};
use super::{
    EniStatus, Model, ModelError, Stamped, Tags, UNATTACHED_IPV4_LIMIT, UNATTACHED_IPV6_LIMIT,
};
use crate::model::types::Eni;

/// CreateNetworkInterface's inputs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateEni {
    /// Subnet to create it in.
    pub subnet_id: String,
    /// Free text.
    pub description: String,
    /// Security groups; empty means the VPC's default group.
    pub security_groups: Vec<String>,
    /// A chosen primary address, else the subnet picks one.
    pub primary_ip: Option<Ipv4Addr>,
    /// Secondary addresses to add at once.
    pub secondary_count: u32,
    /// /28 prefixes to add at once.
    pub prefix_count: u32,
    /// IPv6 addresses to add at once (`Ipv6AddressCount`); `None` is the subnet's default: one
    /// when it assigns IPv6 on creation, none otherwise.
    pub ipv6_address_count: Option<u32>,
    /// Tags.
    pub tags: Tags,
    /// The idempotency token: a request repeated with the same token and parameters gets the
    /// ENI the first one created (EC2 keeps tokens for at least a day; the simulator for its
    /// lifetime).
    pub client_token: Option<String>,
}

/// One ModifyNetworkInterfaceAttribute change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EniChange {
    /// `Attachment.AttachmentId` + `Attachment.DeleteOnTermination`.
    DeleteOnTermination {
        /// Must be the ENI's current attachment.
        attachment_id: String,
        /// New flag.
        value: bool,
    },
    /// `Description.Value`.
    Description(String),
    /// `SecurityGroupId.N` (replaces the set).
    SecurityGroups(Vec<String>),
}

/// Maps an allocator refusal of a specific address to EC2's error.
pub(super) fn ip_take_error(err: TakeError, ip: Ipv4Addr, subnet: &str) -> ModelError {
    match err {
        TakeError::InUse => ModelError::AddressInUse(ip),
        TakeError::Reserved => ModelError::invalid(format!(
            "Address {ip} is reserved by AWS in subnet {subnet}."
        )),
        TakeError::OutsideSubnet | TakeError::Misaligned => ModelError::invalid(format!(
            "Address {ip} does not fall within the subnet's address range ({subnet})."
        )),
    }
}

/// Maps an allocator refusal of a specific prefix to EC2's error.
pub(super) fn prefix_take_error(err: TakeError, p: Ipv4Network, subnet: &str) -> ModelError {
    let why = match err {
        TakeError::InUse => "overlaps addresses already in use",
        TakeError::Reserved => "includes addresses reserved by AWS",
        TakeError::OutsideSubnet => "does not fall within the subnet's address range",
        TakeError::Misaligned => "is not a /28 on a /28 boundary",
    };
    ModelError::invalid(format!("Prefix {p} {why} ({subnet})."))
}

impl Model {
    /// CreateNetworkInterface: a new, unattached ENI with its addresses, all or nothing. A
    /// request whose client token was seen before gets that request's ENI as it is now (even
    /// deleted, as EC2 answers), or IdempotentParameterMismatch when its parameters differ.
    pub fn create_eni(&mut self, req: CreateEni, now_ms: u64) -> Result<Eni, ModelError> {
        if let Some(token) = &req.client_token
            && let Some((first, eni)) = self.client_tokens.get(token)
        {
            if *first != req {
                return Err(ModelError::IdempotentParameterMismatch(token.clone()));
            }
            return Ok(self.enis.get(&eni.id).unwrap_or(eni).clone());
        }
        let token = req.client_token.clone();
        let eni = self.create_new_eni(req.clone(), now_ms)?;
        if let Some(token) = token {
            self.client_tokens.insert(token, (req, eni.clone()));
        }
        Ok(eni)
    }

    fn create_new_eni(&mut self, req: CreateEni, now_ms: u64) -> Result<Eni, ModelError> {
        let subnet = self.subnet(&req.subnet_id)?;
        let groups = self.check_groups(&req.security_groups)?;
        if req.secondary_count > 0 && req.prefix_count > 0 {
            return Err(ModelError::InvalidParameterCombination(
                "You cannot specify a count of IPv4 prefixes together with a count of secondary private IPv4 addresses.".into(),
            ));
        }
        if 1 + req.secondary_count + req.prefix_count > UNATTACHED_IPV4_LIMIT {
            return Err(ModelError::PrivateIpLimit);
        }
        let (subnet_id, az) = (subnet.id.clone(), subnet.az.clone());
        let v6_count = req
            .ipv6_address_count
            .unwrap_or(u32::from(subnet.assign_ipv6_on_creation()));
        // IPv6 works on a copy of the subnet's book, kept only on success.
        let mut space6 = subnet.ipv6.as_ref().map(|v| v.space.clone());
        let space = &mut self
            .subnets
            .get_mut(&subnet_id)
            .ok_or_else(|| ModelError::SubnetNotFound(vec![subnet_id.clone()]))?
            .space;
        // All or nothing: what is taken is given back when a later step fails.
        let (primary_ip, secondaries, prefixes) = take_ipv4(space, &req, &subnet_id)?;
        let ipv6_addresses = match (&mut space6, v6_count) {
            (_, 0) => Ok(Vec::new()),
            (None, _) => Err(ModelError::SubnetWithoutIpv6(subnet_id.clone())),
            (Some(_), n) if n > UNATTACHED_IPV6_LIMIT => Err(ModelError::Ipv6Limit {
                eni_id: "(new)".into(),
                limit: UNATTACHED_IPV6_LIMIT,
            }),
            (Some(s6), n) => s6.take_any(n).ok_or(ModelError::SubnetFull),
        };
        let ipv6_addresses = match ipv6_addresses {
            Ok(v) => v,
            Err(e) => {
                give_back(space, primary_ip, &secondaries, &prefixes);
                return Err(e);
            }
        };

        let id = self.ids.id("eni");
        let mac = self.ids.mac();
        let eni = Eni {
            id: id.clone(),
            mac,
            subnet_id: subnet_id.clone(),
            vpc_id: self.vpc.id.clone(),
            az,
            description: req.description,
            status: EniStatus::Available,
            tags: req.tags,
            primary_ip,
            secondary_ips: stamp(secondaries, now_ms),
            prefixes: stamp(prefixes, now_ms),
            ipv6_addresses: stamp(ipv6_addresses, now_ms),
            ipv6_prefixes: Vec::new(),
            attachment: None,
            security_groups: groups,
            created_ms: now_ms,
        };
        if let Some(s) = self.subnets.get_mut(&subnet_id)
            && let (Some(v6), Some(space6)) = (s.ipv6.as_mut(), space6)
        {
            v6.space = space6;
        }
        Ok(self.enis.entry(id).or_insert(eni).clone())
    }

    /// DeleteNetworkInterface: only when detached; frees every address.
    pub fn delete_eni(&mut self, id: &str) -> Result<(), ModelError> {
        let eni = self.eni(id)?;
        if eni.attachment.is_some() {
            return Err(ModelError::EniInUse(id.to_string()));
        }
        let eni = self
            .enis
            .remove(id)
            .ok_or_else(|| ModelError::EniNotFound(vec![id.to_string()]))?;
        self.release_all(&eni);
        Ok(())
    }

    pub(super) fn release_all(&mut self, eni: &Eni) {
        if let Some(s) = self.subnets.get_mut(&eni.subnet_id) {
            for ip in eni.private_ips() {
                s.space.release(ip);
            }
            for p in &eni.prefixes {
                s.space.release_prefix(p.value);
            }
            if let Some(v6) = s.ipv6.as_mut() {
                for ip in &eni.ipv6_addresses {
                    v6.space.release(ip.value);
                }
                for p in &eni.ipv6_prefixes {
                    v6.space.release_prefix(p.value);
                }
            }
        }
    }

    /// ModifyNetworkInterfaceAttribute.
    pub fn modify_eni(&mut self, id: &str, change: EniChange) -> Result<(), ModelError> {
        let groups = match &change {
            EniChange::SecurityGroups(g) if g.is_empty() => {
                return Err(ModelError::invalid(
                    "At least one security group is required.",
                ));
            }
            EniChange::SecurityGroups(g) => Some(self.check_groups(g)?),
            _ => None,
        };
        let eni = self.eni_mut(id)?;
        match change {
            EniChange::DeleteOnTermination {
                attachment_id,
                value,
            } => match eni.attachment.as_mut() {
                Some(a) if a.id == attachment_id => a.delete_on_termination = value,
                _ => return Err(ModelError::AttachmentNotFound(attachment_id)),
            },
            EniChange::Description(d) => eni.description = d,
            EniChange::SecurityGroups(_) => {
                if let Some(g) = groups {
                    eni.security_groups = g;
                }
            }
        }
        Ok(())
    }
}

/// Takes a new ENI's IPv4 addresses from its subnet's `space`: the primary (the one asked for,
/// else the lowest free), the secondaries, then the prefixes; all or nothing.
fn take_ipv4(
    space: &mut AddressSpace,
    req: &CreateEni,
    subnet_id: &str,
) -> Result<(Ipv4Addr, Vec<Ipv4Addr>, Vec<Ipv4Network>), ModelError> {
    let primary_ip = match req.primary_ip {
        Some(ip) => {
            space
                .take(ip)
                .map_err(|e| ip_take_error(e, ip, subnet_id))?;
            ip
        }
        None => space
            .take_any(1)
            .and_then(|v| v.first().copied())
            .ok_or(ModelError::SubnetFull)?,
    };
    let Some(secondaries) = space.take_any(req.secondary_count) else {
        give_back(space, primary_ip, &[], &[]);
        return Err(ModelError::SubnetFull);
    };
    let Some(prefixes) = space.take_prefixes(req.prefix_count) else {
        give_back(space, primary_ip, &secondaries, &[]);
        return Err(ModelError::NoCidrBlocks);
    };
    Ok((primary_ip, secondaries, prefixes))
}

/// Gives back what [`take_ipv4`] took.
fn give_back(
    space: &mut AddressSpace,
    primary: Ipv4Addr,
    secondaries: &[Ipv4Addr],
    prefixes: &[Ipv4Network],
) {
    for ip in std::iter::once(&primary).chain(secondaries) {
        space.release(*ip);
    }
    for p in prefixes {
        space.release_prefix(*p);
    }
}

pub(super) fn stamp<T>(values: Vec<T>, at_ms: u64) -> Vec<Stamped<T>> {
    values
        .into_iter()
        .map(|value| Stamped { value, at_ms })
        .collect()
}
