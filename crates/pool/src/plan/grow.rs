//! Growth: one step towards target, capped by max pods, per-ENI slots and max ENIs.

use super::targets::Shortfall;
use super::view::{EniView, PoolView, Unit};
use super::{Action, Blocked, NodeLimits, Plan, Targets};

/// The growth step for a pool `short` of target: fill the first ENI (by device number) with a
/// free slot, else create an ENI pre-loaded with what is wanted (the Go CNI's
/// `increaseDatastorePool`), else say why not.
///
/// With prefix delegation, where EC2 refuses prefixes for now ([`crate::PrefixFallbacks`])
/// growth is by /32s instead, each in a slot as a prefix would be. The order is then: ENIs
/// that get prefixes, a new ENI with prefixes, ENIs that fall back to /32s, a new ENI with
/// /32s: a slot holding a /32 serves one pod where a prefix serves 16, so /32s are the last
/// resort.
pub(super) fn growth(
    view: &PoolView<'_>,
    limits: &NodeLimits,
    targets: &Targets,
    short: Shortfall,
) -> Plan {
    let total = view.totals.total;
    if total >= limits.max_pods {
        return blocked(Blocked::MaxPods {
            max_pods: limits.max_pods,
        });
    }
    let room = limits.max_pods - total;
    // With delegation the last prefix may pass max pods by up to 15 addresses: stopping short
    // of it would leave pods the node may run without an address.
    let prefixes = short.units.min(room.div_ceil(targets.unit()));
    let ips = short.addresses.max(1).min(room);
    let per_eni = limits.secondary_ips_per_eni;
    let open = |e: &&EniView<'_>| !e.excluded && e.slots < per_eni;
    let may_create = per_eni > 0 && (view.enis.len() as u32) < limits.max_enis;
    if !targets.prefix_delegation {
        if let Some(eni) = view.enis.iter().find(open) {
            return assign_ips(eni, ips.min(per_eni - eni.slots));
        }
        if may_create {
            return create(ips.min(per_eni), 0);
        }
    } else {
        if let Some(eni) = view.enis.iter().filter(|e| !e.refused).find(open) {
            return grow(Action::AssignPrefixes {
                eni_id: eni.info.id.clone(),
                count: prefixes.min(per_eni - eni.slots),
            });
        }
        if may_create && !view.new_enis_refused {
            return create(0, prefixes.min(per_eni));
        }
        if let Some(eni) = view.enis.iter().filter(|e| e.refused).find(open) {
            return assign_ips(eni, ips.min(per_eni - eni.slots));
        }
        if may_create {
            return create(ips.min(per_eni), 0);
        }
    }
    blocked(Blocked::MaxEnis {
        enis: view.enis.len() as u32,
    })
}

/// The probe of a subnet whose backoff has ended, when growth does not ask for a prefix
/// there (asking is the only way to know that blocks are free again): one prefix on the first
/// such ENI with a free slot, below max pods. Else, when a release may happen now, one of its
/// available /32s given back to make that slot, but only if the node needs room it may have
/// (below max pods) or the fallback is long: otherwise the release, a refused probe and the
/// refill cost three calls for nothing, and the node waits for a slot to free. A long
/// fallback ends at max pods too, so free /32s do not stay for good.
pub(super) fn probe(
    view: &PoolView<'_>,
    limits: &NodeLimits,
    may_release: bool,
    needs_room: bool,
) -> Option<(String, Action)> {
    let at_max = view.totals.total >= limits.max_pods;
    let probing = view.enis.iter().filter(|e| e.probing && !e.excluded);
    if !at_max
        && let Some(eni) = probing
            .clone()
            .find(|e| e.slots < limits.secondary_ips_per_eni)
    {
        let eni_id = eni.info.id.clone();
        return Some((eni_id.clone(), Action::AssignPrefixes { eni_id, count: 1 }));
    }
    if !may_release {
        return None;
    }
    // `releasable` is highest first: its first /32 is the one to give back.
    probing
        .filter(|e| (needs_room && !at_max) || e.long_fallback)
        .find_map(|e| {
            let ip = e.releasable.iter().find_map(|u| match u {
                Unit::Ip(ip) => Some(*ip),
                Unit::Prefix(_) => None,
            })?;
            let eni_id = e.info.id.clone();
            let action = Action::ReleaseIps {
                eni_id: eni_id.clone(),
                ips: vec![ip],
            };
            Some((eni_id, action))
        })
}

fn assign_ips(eni: &EniView<'_>, count: u32) -> Plan {
    grow(Action::AssignIps {
        eni_id: eni.info.id.clone(),
        count,
    })
}

fn create(ips: u32, prefixes: u32) -> Plan {
    grow(Action::CreateEni { ips, prefixes })
}

fn grow(action: Action) -> Plan {
    Plan {
        actions: vec![action],
        blocked: None,
    }
}

fn blocked(why: Blocked) -> Plan {
    Plan {
        actions: Vec::new(),
        blocked: Some(why),
    }
}
