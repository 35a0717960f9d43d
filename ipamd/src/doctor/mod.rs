//! `ipamd doctor`: the Go CNI's troubleshooting checklist as one command.
//!
//! Three steps, each its own module: [`gather`] reads everything once through the node's
//! seams (IMDS, EC2 and its dry runs, ipamd's socket and endpoints, netlink, iptables, the CNI
//! directories, the log) into [`Facts`]; [`checks`] turn facts into findings without any side
//! effect, so every verdict is unit-tested on hand-made facts; [`render`] shows them to a
//! person or as JSON (schema in docs/doctor.md). [`bundle`] packs what support needs and
//! [`fix`] carries out the safe repairs the findings name.

pub mod bundle;
pub mod checks;
pub mod facts;
pub mod fix;
pub mod gather;
pub mod http;
pub mod render;

use serde::Serialize;

pub use facts::Facts;

/// How bad a finding is. Ordered: a report's worst finding decides its verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Checked and fine.
    Ok,
    /// Worth knowing; nothing to do.
    Info,
    /// Works now, but something is off or will break: the node is degraded.
    Warning,
    /// Pods cannot be (or are not) networked as they should: the node is broken.
    Error,
}

/// Which part of the checklist a finding belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    /// IMDS, the instance's limits, EC2 and IAM.
    Identity,
    /// Room to grow: subnets, ENI and address limits, max pods, growth.
    Capacity,
    /// EC2, IMDS, ipamd's store and the kernel agree.
    Consistency,
    /// The node's CNI configuration and plugin.
    Cni,
    /// ipamd itself.
    Ipamd,
}

/// A repair `doctor --fix` may carry out: only ones that cannot take anything from a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repair {
    /// Adds a missing rule of a pod ipamd holds (`ip rule add`).
    AddRule(facts::KRule),
    /// Removes a rule no pod owns.
    DeleteRule(facts::KRule),
    /// Removes a route no pod owns.
    DeleteRoute(facts::KRoute),
    /// Re-applies the node's SNAT, connmark and rp_filter setup (`ipamd init`).
    NodeSetup,
}

impl std::fmt::Display for Repair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Repair::AddRule(r) => write!(f, "ip rule add {r}"),
            Repair::DeleteRule(r) => write!(f, "ip rule del {r}"),
            Repair::DeleteRoute(r) => write!(f, "ip route del {r}"),
            Repair::NodeSetup => write!(
                f,
                "set up the node's SNAT, connmark and rp_filter again (as `ipamd init`)"
            ),
        }
    }
}

/// One verdict of one check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The check's stable id (`pod-wiring`, `iam`, ...).
    pub check: &'static str,
    /// Its part of the checklist.
    pub group: Group,
    /// How bad.
    pub severity: Severity,
    /// What was seen, with the names and numbers that prove it.
    pub evidence: String,
    /// What to do; `None` when there is nothing to do.
    pub fix: Option<String>,
    /// What `--fix` would do about it.
    #[serde(skip)]
    pub repair: Option<Repair>,
}

impl Finding {
    /// A finding without a fix.
    pub fn new(
        check: &'static str,
        group: Group,
        severity: Severity,
        evidence: impl Into<String>,
    ) -> Self {
        Self {
            check,
            group,
            severity,
            evidence: evidence.into(),
            fix: None,
            repair: None,
        }
    }

    /// With what to do.
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// With the repair `--fix` carries out.
    pub fn repair(mut self, repair: Repair) -> Self {
        self.repair = Some(repair);
        self
    }
}

/// The node's state in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Nothing worse than info.
    Healthy,
    /// A warning.
    Degraded,
    /// An error.
    Broken,
}

impl Verdict {
    /// The doctor's exit status: 0 healthy, 1 degraded, 2 broken.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Healthy => 0,
            Verdict::Degraded => 1,
            Verdict::Broken => 2,
        }
    }
}

/// Every finding, and what they add up to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The worst finding's verdict.
    pub verdict: Verdict,
    /// One line for a person.
    pub summary: String,
    /// Grouped, worst first within each group.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Sorts the findings and works out the verdict.
    pub fn new(mut findings: Vec<Finding>) -> Self {
        findings.sort_by(|a, b| a.group.cmp(&b.group).then(b.severity.cmp(&a.severity)));
        let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
        let (errors, warnings) = (count(Severity::Error), count(Severity::Warning));
        let verdict = if errors > 0 {
            Verdict::Broken
        } else if warnings > 0 {
            Verdict::Degraded
        } else {
            Verdict::Healthy
        };
        let summary = format!(
            "{}: {errors} error(s), {warnings} warning(s), {} check(s) passed",
            match verdict {
                Verdict::Healthy => "healthy",
                Verdict::Degraded => "degraded",
                Verdict::Broken => "broken",
            },
            count(Severity::Ok),
        );
        Self {
            verdict,
            summary,
            findings,
        }
    }
}

/// Every check on `facts`.
pub fn diagnose(facts: &Facts) -> Report {
    Report::new(checks::all(facts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(severity: Severity) -> Finding {
        Finding::new("x", Group::Ipamd, severity, "e")
    }

    #[test]
    fn the_worst_finding_decides_the_verdict() {
        assert_eq!(Report::new(vec![]).verdict, Verdict::Healthy);
        let r = Report::new(vec![finding(Severity::Ok), finding(Severity::Info)]);
        assert_eq!((r.verdict, r.verdict.exit_code()), (Verdict::Healthy, 0));
        let r = Report::new(vec![finding(Severity::Warning), finding(Severity::Ok)]);
        assert_eq!((r.verdict, r.verdict.exit_code()), (Verdict::Degraded, 1));
        let r = Report::new(vec![finding(Severity::Warning), finding(Severity::Error)]);
        assert_eq!((r.verdict, r.verdict.exit_code()), (Verdict::Broken, 2));
        assert_eq!(r.findings[0].severity, Severity::Error);
        assert!(r.summary.starts_with("broken: 1 error(s), 1 warning(s)"));
    }
}
