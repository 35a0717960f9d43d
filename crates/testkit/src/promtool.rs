//! `promtool check metrics`, Prometheus' own lint of an exposition (Debian's `prometheus`
//! package, which scripts/test.sh installs), and the allow-list of findings kept on purpose.

use std::collections::BTreeSet;
use std::path::Path;

use crate::cmd::{require_commands, run_bounded};

/// The lines `promtool check metrics` prints about `exposition`, which must parse: exit 0
/// (clean) or 3 (lint findings only); 1 would be a parse error.
pub fn findings(exposition: &str) -> BTreeSet<String> {
    require_commands(&["promtool"], "prometheus");
    let out = run_bounded(
        30,
        "promtool",
        &["check", "metrics"],
        Some(exposition.as_bytes()),
    );
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "promtool {}:\n{report}\n--- input ---\n{exposition}",
        out.status
    );
    report
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// The findings an allow-list file keeps: its lines that are neither blank nor comments.
pub fn allowed(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}
