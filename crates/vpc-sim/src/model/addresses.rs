//! AssignPrivateIpAddresses / UnassignPrivateIpAddresses.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;

use super::alloc::{Space, TakeError};
use super::enis::{ip_take_error, prefix_take_error, stamp};
use super::{Model, ModelError, UNATTACHED_IPV4_LIMIT};
use crate::model::types::Eni;

/// What to assign: exactly one of EC2's four forms, in either family (the parameter names are
/// AssignPrivateIpAddresses' / AssignIpv6Addresses').
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<A, N> {
    /// `SecondaryPrivateIpAddressCount` / `Ipv6AddressCount`.
    Count(u32),
    /// `PrivateIpAddress.N` / `Ipv6Addresses.N`.
    Addresses(Vec<A>),
    /// `Ipv4PrefixCount` / `Ipv6PrefixCount` (/80 prefixes).
    PrefixCount(u32),
    /// `Ipv4Prefix.N` / `Ipv6Prefix.N`.
    Prefixes(Vec<N>),
}

/// AssignPrivateIpAddresses' request.
pub type AssignRequest = Request<Ipv4Addr, Ipv4Network>;

impl<A, N> Request<A, N> {
    /// How many addresses or prefixes it asks for.
    pub(super) fn wanted(&self) -> u32 {
        match self {
            Request::Count(n) | Request::PrefixCount(n) => *n,
            Request::Addresses(v) => v.len() as u32,
            Request::Prefixes(v) => v.len() as u32,
        }
    }

    /// Whether it asks for prefixes (which need a Nitro instance type).
    pub(super) fn wants_prefixes(&self) -> bool {
        matches!(self, Request::PrefixCount(_) | Request::Prefixes(_))
    }
}

/// What [`take_request`] took: (addresses, prefixes).
type Taken<S> = (Vec<<S as Space>::Addr>, Vec<<S as Space>::Net>);

/// Takes what `req` asks for from `space`: (addresses, prefixes). All or nothing: on an error
/// whatever it took is given back, so `space` is as it was.
pub(super) fn take_request<S: Space>(
    space: &mut S,
    req: Request<S::Addr, S::Net>,
    ip_error: impl Fn(TakeError, S::Addr) -> ModelError,
    prefix_error: impl Fn(TakeError, S::Net) -> ModelError,
) -> Result<Taken<S>, ModelError> {
    let mut ips = Vec::new();
    let mut prefixes = Vec::new();
    let result = take_into(space, req, ip_error, prefix_error, &mut ips, &mut prefixes);
    if result.is_err() {
        for ip in ips.drain(..) {
            space.release(ip);
        }
        for p in prefixes.drain(..) {
            space.release_prefix(p);
        }
    }
    result.map(|()| (ips, prefixes))
}

/// [`take_request`]'s work, recording in `ips` and `prefixes` what it took, also on an error.
fn take_into<S: Space>(
    space: &mut S,
    req: Request<S::Addr, S::Net>,
    ip_error: impl Fn(TakeError, S::Addr) -> ModelError,
    prefix_error: impl Fn(TakeError, S::Net) -> ModelError,
    ips: &mut Vec<S::Addr>,
    prefixes: &mut Vec<S::Net>,
) -> Result<(), ModelError> {
    match req {
        Request::Count(n) => *ips = space.take_any(n).ok_or(ModelError::SubnetFull)?,
        Request::Addresses(wanted) => {
            no_duplicates(&wanted)?;
            for ip in wanted {
                space.take(ip).map_err(|e| ip_error(e, ip))?;
                ips.push(ip);
            }
        }
        Request::PrefixCount(n) => {
            *prefixes = space.take_prefixes(n).ok_or(ModelError::NoCidrBlocks)?;
        }
        Request::Prefixes(wanted) => {
            no_duplicates(&wanted)?;
            for p in wanted {
                space.take_prefix(p).map_err(|e| prefix_error(e, p))?;
                prefixes.push(p);
            }
        }
    }
    Ok(())
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
        let wanted = req.wanted();
        if wanted == 0 {
            return Err(ModelError::invalid(
                "The number of addresses or prefixes to assign must be at least 1.",
            ));
        }
        if req.wants_prefixes() {
            self.check_prefix_support(eni)?;
        }
        if eni.ipv4_slots() + wanted > self.ipv4_limit(eni)? {
            return Err(ModelError::PrivateIpLimit);
        }
        let subnet_id = self.subnet(&eni.subnet_id)?.id.clone();
        let subnet = self
            .subnets
            .get_mut(&subnet_id)
            .ok_or_else(|| ModelError::SubnetNotFound(vec![subnet_id.clone()]))?;
        // All or nothing: take_request gives back what it took when it fails.
        let (ips, prefixes) = take_request(
            &mut subnet.space,
            req,
            |e, ip| ip_take_error(e, ip, &subnet_id),
            |e, p| prefix_take_error(e, p, &subnet_id),
        )?;
        let out = Assigned { ips, prefixes };
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
