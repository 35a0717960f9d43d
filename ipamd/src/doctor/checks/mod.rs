//! The checks: pure functions from [`Facts`] to findings, one module per part of the
//! checklist.

mod capacity;
mod cni;
mod consistency;
mod daemon;
#[cfg(test)]
pub(crate) mod fixture;
mod identity;

pub use cni::{is_ours as cni_is_ours, our_plugin as cni_our_plugin};
pub use consistency::imds_disagreements;

use super::{Facts, Finding};

/// Every check's findings.
pub fn all(facts: &Facts) -> Vec<Finding> {
    let mut out = identity::check(facts);
    out.extend(capacity::check(facts));
    out.extend(consistency::check(facts));
    out.extend(cni::check(facts));
    out.extend(daemon::check(facts));
    out
}

/// Up to `max` items, then how many more: evidence stays readable on a node with many pods.
fn listed<T: std::fmt::Display>(items: &[T], max: usize) -> String {
    let mut text = items
        .iter()
        .take(max)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > max {
        text.push_str(&format!(" and {} more", items.len() - max));
    }
    text
}
