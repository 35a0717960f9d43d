//! AssignPrivateIpAddresses / UnassignPrivateIpAddresses.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;

use super::enis::{ip_take_error, prefix_take_error, stamp};
use super::{Model, ModelError, UNATTACHED_IPV4_LIMIT};
use crate::model::types::Eni;

/// What to assign: exactly one of EC2's four forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssignRequest {
    /// `SecondaryPrivateIpAddressCount`.
    Count(u32),
    /// `PrivateIpAddress.N`.
    Addresses(Vec<Ipv4Addr>),
    /// `Ipv4PrefixCount`.
    PrefixCount(u32),
    /// `Ipv4Prefix.N`.
    Prefixes(Vec<Ipv4Network>),
}

/// What was newly assigned (EC2's reply lists only these).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assigned {
    /// New secondary addresses.
    pub ips: Vec<Ipv4Addr>,
    /// New prefixes.
    pub prefixes: Vec<Ipv4Network>,
}

impl Model {
    /// The IPv4-per-ENI limit that applies to `eni`: its instance type's when attached.
    fn ipv4_limit(&self, eni: &Eni) -> Result<u32, ModelError> {
        match &eni.attachment {
            Some(a) => {
                let ty = &self.instance(&a.instance_id)?.instance_type;
                Ok(self.limits(ty)?.ipv4_per_eni)
            }
            None => Ok(UNATTACHED_IPV4_LIMIT),
        }
    }

    pub(super) fn check_prefix_support(&self, eni: &Eni) -> Result<(), ModelError> {
        let Some(a) = &eni.attachment else {
            return Ok(());
        };
        let ty = &self.instance(&a.instance_id)?.instance_type;
        if self.limits(ty)?.supports_prefix_delegation() {
            Ok(())
        } else {
            Err(ModelError::invalid(format!(
                "Prefix delegation is not supported for instance type {ty}: it needs a Nitro instance."
            )))
        }
    }

    /// AssignPrivateIpAddresses: all or nothing, within the ENI's limit and the subnet's space.
    pub fn assign_private_ips(
        &mut self,
        eni_id: &str,
        req: AssignRequest,
        now_ms: u64,
    ) -> Result<Assigned, ModelError> {
        let eni = self.eni(eni_id)?;
        let wanted = match &req {
            AssignRequest::Count(n) | AssignRequest::PrefixCount(n) => *n,
            AssignRequest::Addresses(v) => v.len() as u32,
            AssignRequest::Prefixes(v) => v.len() as u32,
        };
        if wanted == 0 {
            return Err(ModelError::invalid(
                "The number of addresses or prefixes to assign must be at least 1.",
            ));
        }
        if matches!(
            req,
            AssignRequest::PrefixCount(_) | AssignRequest::Prefixes(_)
        ) {
            self.check_prefix_support(eni)?;
        }
        if eni.ipv4_slots() + wanted > self.ipv4_limit(eni)? {
            return Err(ModelError::PrivateIpLimit);
        }
        let subnet = self.subnet(&eni.subnet_id)?;
        let mut space = subnet.space.clone();
        let mut out = Assigned::default();
        match req {
            AssignRequest::Count(n) => {
                out.ips = space.take_any(n).ok_or(ModelError::SubnetFull)?;
            }
            AssignRequest::Addresses(ips) => {
                no_duplicates(&ips)?;
                for ip in ips {
                    space
                        .take(ip)
                        .map_err(|e| ip_take_error(e, ip, &subnet.id))?;
                    out.ips.push(ip);
                }
            }
            AssignRequest::PrefixCount(n) => {
                out.prefixes = space.take_prefixes(n).ok_or(ModelError::NoCidrBlocks)?;
            }
            AssignRequest::Prefixes(ps) => {
                no_duplicates(&ps)?;
                for p in ps {
                    space
                        .take_prefix(p)
                        .map_err(|e| prefix_take_error(e, p, &subnet.id))?;
                    out.prefixes.push(p);
                }
            }
        }
        let subnet_id = subnet.id.clone();
        if let Some(s) = self.subnets.get_mut(&subnet_id) {
            s.space = space;
        }
        let eni = self.eni_mut(eni_id)?;
        eni.secondary_ips.extend(stamp(out.ips.clone(), now_ms));
        eni.prefixes.extend(stamp(out.prefixes.clone(), now_ms));
        Ok(out)
    }

    /// UnassignPrivateIpAddresses: every address/prefix must be a secondary of this ENI, else
    /// nothing changes.
    pub fn unassign_private_ips(
        &mut self,
        eni_id: &str,
        ips: &[Ipv4Addr],
        prefixes: &[Ipv4Network],
    ) -> Result<(), ModelError> {
        let eni = self.eni(eni_id)?;
        if ips.is_empty() && prefixes.is_empty() {
            return Err(ModelError::invalid(
                "Specify at least one private IP address or IPv4 prefix to unassign.",
            ));
        }
        if let Some(ip) = ips.iter().find(|ip| **ip == eni.primary_ip) {
            return Err(ModelError::invalid(format!(
                "The primary private IP address {ip} of interface {eni_id} cannot be unassigned."
            )));
        }
        let not_assigned = ips
            .iter()
            .any(|ip| !eni.secondary_ips.iter().any(|s| s.value == *ip))
            || prefixes
                .iter()
                .any(|p| !eni.prefixes.iter().any(|s| s.value == *p));
        if not_assigned {
            return Err(ModelError::invalid(format!(
                "Some of the specified addresses are not assigned to interface {eni_id}"
            )));
        }
        let subnet_id = eni.subnet_id.clone();
        let eni = self.eni_mut(eni_id)?;
        eni.secondary_ips.retain(|s| !ips.contains(&s.value));
        eni.prefixes.retain(|s| !prefixes.contains(&s.value));
        if let Some(s) = self.subnets.get_mut(&subnet_id) {
            for ip in ips {
                s.space.release(*ip);
            }
            for p in prefixes {
                s.space.release_prefix(*p);
            }
        }
        Ok(())
    }
}

pub(super) fn no_duplicates<T: std::hash::Hash + Eq + std::fmt::Display>(
    v: &[T],
) -> Result<(), ModelError> {
    let mut seen = HashSet::new();
    match v.iter().find(|x| !seen.insert(*x)) {
        Some(dup) => Err(ModelError::invalid(format!(
            "{dup} is listed more than once."
        ))),
        None => Ok(()),
    }
}
