//! AssignIpv6Addresses / UnassignIpv6Addresses, and the per-ENI IPv6 limit.

use std::net::Ipv6Addr;

use cloud::limits::InstanceLimits;
use ipnetwork::Ipv6Network;

use super::addresses::{Request, no_duplicates, take_request};
use super::alloc::TakeError;
use super::enis::stamp;
use super::{Model, ModelError, UNATTACHED_IPV6_LIMIT};
use crate::model::types::Eni;

/// Families EC2 gives no IPv6 at all ("all instance types support IPv6 addressing except C1,
/// M1, M2, M3 and T1").
const NO_IPV6_FAMILIES: &[&str] = &["c1", "m1", "m2", "m3", "t1"];

/// IPv6 addresses (prefixes counting one each) an ENI of `instance_type` may hold: EC2's
/// `Ipv6AddressesPerInterface`, which equals the IPv4 figure on every type that has IPv6 at all,
/// and 0 on the families without. The instance table knows only the IPv4 figure, hence this.
pub fn ipv6_per_eni(instance_type: &str, limits: &InstanceLimits) -> u32 {
    let family = instance_type.split('.').next().unwrap_or_default();
    if NO_IPV6_FAMILIES.contains(&family) {
        0
    } else {
        limits.ipv4_per_eni
    }
}

/// AssignIpv6Addresses' request.
pub type Assign6Request = Request<Ipv6Addr, Ipv6Network>;

/// What was newly assigned (EC2's reply lists only these).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assigned6 {
    /// New addresses.
    pub addresses: Vec<Ipv6Addr>,
    /// New /80 prefixes.
    pub prefixes: Vec<Ipv6Network>,
}

/// Maps an allocator refusal of a specific IPv6 address to EC2's error.
fn ip_take_error(err: TakeError, ip: Ipv6Addr, subnet: &str) -> ModelError {
    match err {
        TakeError::InUse => ModelError::Ipv6AddressInUse(ip),
        TakeError::Reserved => ModelError::invalid(format!(
            "Address {ip} is reserved by AWS in subnet {subnet}."
        )),
        TakeError::OutsideSubnet | TakeError::Misaligned => ModelError::invalid(format!(
            "Address {ip} does not fall within the subnet's IPv6 address range ({subnet})."
        )),
    }
}

/// Maps an allocator refusal of a specific IPv6 prefix to EC2's error.
fn prefix_take_error(err: TakeError, p: Ipv6Network, subnet: &str) -> ModelError {
    let why = match err {
        TakeError::InUse => "overlaps addresses already in use",
        TakeError::Reserved => "includes addresses reserved by AWS",
        TakeError::OutsideSubnet => "does not fall within the subnet's IPv6 address range",
        TakeError::Misaligned => "is not a /80 on a /80 boundary",
    };
    ModelError::invalid(format!("Prefix {p} {why} ({subnet})."))
}

impl Model {
    /// The IPv6-per-ENI limit that applies to `eni`: its instance type's when attached.
    pub(super) fn ipv6_limit(&self, eni: &Eni) -> Result<u32, ModelError> {
        match &eni.attachment {
            Some(a) => {
                let ty = &self.instance(&a.instance_id)?.instance_type;
                Ok(ipv6_per_eni(ty, &self.limits(ty)?))
            }
            None => Ok(UNATTACHED_IPV6_LIMIT),
        }
    }

    /// AssignIpv6Addresses: all or nothing, within the ENI's IPv6 limit, from its subnet's /64.
    pub fn assign_ipv6(
        &mut self,
        eni_id: &str,
        req: Assign6Request,
        now_ms: u64,
    ) -> Result<Assigned6, ModelError> {
        let eni = self.eni(eni_id)?;
        let wanted = req.wanted();
        if wanted == 0 {
            return Err(ModelError::invalid(
                "The number of IPv6 addresses or prefixes to assign must be at least 1.",
            ));
        }
        let subnet = self.subnet(&eni.subnet_id)?;
        let Some(v6) = &subnet.ipv6 else {
            return Err(ModelError::SubnetWithoutIpv6(subnet.id.clone()));
        };
        if req.wants_prefixes() {
            self.check_prefix_support(eni)?;
        }
        let limit = self.ipv6_limit(eni)?;
        if eni.ipv6_slots() + wanted > limit {
            return Err(ModelError::Ipv6Limit {
                eni_id: eni_id.to_string(),
                limit,
            });
        }
        let mut space = v6.space.clone();
        let (addresses, prefixes) = take_request(
            &mut space,
            req,
            |e, ip| ip_take_error(e, ip, &subnet.id),
            |e, p| prefix_take_error(e, p, &subnet.id),
        )?;
        let out = Assigned6 {
            addresses,
            prefixes,
        };
        let subnet_id = subnet.id.clone();
        if let Some(v6) = self
            .subnets
            .get_mut(&subnet_id)
            .and_then(|s| s.ipv6.as_mut())
        {
            v6.space = space;
        }
        let eni = self.eni_mut(eni_id)?;
        eni.ipv6_addresses
            .extend(stamp(out.addresses.clone(), now_ms));
        eni.ipv6_prefixes
            .extend(stamp(out.prefixes.clone(), now_ms));
        Ok(out)
    }

    /// UnassignIpv6Addresses: every address and prefix must be the ENI's, else nothing changes.
    /// Returns what was unassigned, as EC2's reply lists it.
    pub fn unassign_ipv6(
        &mut self,
        eni_id: &str,
        addresses: &[Ipv6Addr],
        prefixes: &[Ipv6Network],
    ) -> Result<Assigned6, ModelError> {
        let eni = self.eni(eni_id)?;
        if addresses.is_empty() && prefixes.is_empty() {
            return Err(ModelError::invalid(
                "Specify at least one IPv6 address or IPv6 prefix to unassign.",
            ));
        }
        let not_assigned = addresses
            .iter()
            .any(|ip| !eni.ipv6_addresses.iter().any(|s| s.value == *ip))
            || prefixes
                .iter()
                .any(|p| !eni.ipv6_prefixes.iter().any(|s| s.value == *p));
        if not_assigned {
            return Err(ModelError::invalid(format!(
                "Some of the specified IPv6 addresses or prefixes are not assigned to interface {eni_id}"
            )));
        }
        no_duplicates(addresses)?;
        no_duplicates(prefixes)?;
        let subnet_id = eni.subnet_id.clone();
        let eni = self.eni_mut(eni_id)?;
        eni.ipv6_addresses.retain(|s| !addresses.contains(&s.value));
        eni.ipv6_prefixes.retain(|s| !prefixes.contains(&s.value));
        if let Some(v6) = self
            .subnets
            .get_mut(&subnet_id)
            .and_then(|s| s.ipv6.as_mut())
        {
            for ip in addresses {
                v6.space.release(*ip);
            }
            for p in prefixes {
                v6.space.release_prefix(*p);
            }
        }
        Ok(Assigned6 {
            addresses: addresses.to_vec(),
            prefixes: prefixes.to_vec(),
        })
    }
}
