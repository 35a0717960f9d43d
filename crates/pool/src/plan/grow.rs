//! Growth: one step towards target, capped by max pods, per-ENI slots and max ENIs.

use super::view::PoolView;
use super::{Action, Blocked, NodeLimits, Plan, Targets};

/// The growth step for a pool `units` short of target (addresses, or prefixes with
/// delegation): fill the first ENI (by device number) with a free slot, else create an ENI
/// pre-loaded with what is wanted (the Go CNI's `increaseDatastorePool`), else say why not.
pub(super) fn growth(
    view: &PoolView<'_>,
    limits: &NodeLimits,
    targets: &Targets,
    units: u32,
) -> Plan {
    let total = view.totals.total;
    if total >= limits.max_pods {
        return blocked(Blocked::MaxPods {
            max_pods: limits.max_pods,
        });
    }
    // With delegation the last prefix may pass max pods by up to 15 addresses: stopping short
    // of it would leave pods the node may run without an address.
    let want = units.min((limits.max_pods - total).div_ceil(targets.unit()));
    let per_eni = limits.secondary_ips_per_eni;
    if want > 0 {
        if let Some(eni) = view.enis.iter().find(|e| !e.excluded && e.slots < per_eni) {
            let count = want.min(per_eni - eni.slots);
            let eni_id = eni.info.id.clone();
            let action = if targets.prefix_delegation {
                Action::AssignPrefixes { eni_id, count }
            } else {
                Action::AssignIps { eni_id, count }
            };
            return grow(action);
        }
        if per_eni > 0 && (view.enis.len() as u32) < limits.max_enis {
            let count = want.min(per_eni);
            let action = if targets.prefix_delegation {
                Action::CreateEni {
                    ips: 0,
                    prefixes: count,
                }
            } else {
                Action::CreateEni {
                    ips: count,
                    prefixes: 0,
                }
            };
            return grow(action);
        }
    }
    blocked(Blocked::MaxEnis {
        enis: view.enis.len() as u32,
    })
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
