//! Shrinking: giving back free addresses and prefixes above target, and freeing unused ENIs.

use std::cmp::Reverse;

use super::demand::Demand;
use super::targets::Surplus;
use super::view::{EniView, PoolView, Unit};
use super::{Action, MIN_ENI_AGE, NodeLimits, Targets};
use crate::time::Timestamp;

/// What to give back, at most one release action of each kind per ENI: every retiring /32
/// (see [`EniView::retiring`]), and what the surplus allows from the ENI with the fewest
/// assigned addresses first (then the highest device number: ENIs emptied first can be
/// freed), highest addresses first. Only available addresses and wholly available prefixes
/// are candidates: see [`crate::plan()`] for why cooling ones stay.
pub(super) fn releases(view: &PoolView<'_>, surplus: Option<Surplus>) -> Vec<Action> {
    let mut order: Vec<&EniView<'_>> = view.enis.iter().collect();
    order.sort_by_key(|e| (e.totals.assigned, Reverse(e.info.device_number)));
    let (mut addresses_left, mut prefixes_left) = match surplus {
        Some(Surplus::Addresses(n)) => (n, u32::MAX),
        Some(Surplus::Prefixes(n)) => (0, n),
        None => (0, 0),
    };
    let mut actions = Vec::new();
    for eni in order {
        let mut ips = eni.retiring.clone();
        let mut prefixes = Vec::new();
        for &unit in &eni.releasable {
            match (unit, surplus) {
                (Unit::Prefix(p), Some(Surplus::Prefixes(_))) if prefixes_left > 0 => {
                    prefixes_left -= 1;
                    prefixes.push(p);
                }
                (_, Some(Surplus::Addresses(_))) if unit.size() <= addresses_left => {
                    addresses_left -= unit.size();
                    match unit {
                        Unit::Ip(ip) => ips.push(ip),
                        Unit::Prefix(p) => prefixes.push(p),
                    }
                }
                _ => {}
            }
        }
        ips.sort_by_key(|ip| Reverse(*ip));
        let eni_id = &eni.info.id;
        if !prefixes.is_empty() {
            actions.push(Action::ReleasePrefixes {
                eni_id: eni_id.clone(),
                prefixes,
            });
        }
        if !ips.is_empty() {
            actions.push(Action::ReleaseIps {
                eni_id: eni_id.clone(),
                ips,
            });
        }
    }
    actions
}

/// The ENI to free, if any (the Go CNI's `tryFreeENI`): never the primary, never one younger
/// than [`MIN_ENI_AGE`], never one with an assigned or cooling address, never one the targets
/// still need. Highest device number first, so the choice is deterministic.
pub(super) fn eni_to_free<'a>(
    view: &'a PoolView<'_>,
    demand: &Demand,
    limits: &NodeLimits,
    targets: &Targets,
    now: Timestamp,
) -> Option<&'a str> {
    let unused = |e: &&EniView<'_>| !e.info.is_primary() && e.totals.assigned == 0;
    let any_unused = view.enis.iter().any(|e| unused(&e));
    if !demand.may_free_enis(&view.totals, limits, targets, any_unused) {
        return None;
    }
    view.enis
        .iter()
        .rev()
        .filter(unused)
        .filter(|e| e.cooling == 0 && e.info.created_at.after(MIN_ENI_AGE) <= now)
        .find(|e| demand.met_by(&view.totals.without(e.totals), limits, targets))
        .map(|e| e.info.id.as_str())
}
