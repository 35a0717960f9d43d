//! The report for a person (grouped, coloured when a terminal, one summary line) and for
//! tools (JSON, schema in docs/doctor.md).

use std::fmt::Write as _;

use anstyle::{AnsiColor, Style};
use serde::Serialize;

use super::{Finding, Group, Report, Severity};

/// The JSON schema's version, bumped on any change a tool could trip over.
pub const SCHEMA: u32 = 1;

#[derive(Serialize)]
struct Json<'a> {
    schema: u32,
    #[serde(flatten)]
    report: &'a Report,
}

/// The report as one JSON document.
pub fn json(report: &Report) -> String {
    serde_json::to_string_pretty(&Json {
        schema: SCHEMA,
        report,
    })
    .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn label(severity: Severity) -> (&'static str, Style) {
    let colour = |c: AnsiColor| Style::new().fg_color(Some(c.into())).bold();
    match severity {
        Severity::Ok => ("ok  ", colour(AnsiColor::Green)),
        Severity::Info => ("info", colour(AnsiColor::Blue)),
        Severity::Warning => ("WARN", colour(AnsiColor::Yellow)),
        Severity::Error => ("FAIL", colour(AnsiColor::Red)),
    }
}

fn group_name(group: Group) -> &'static str {
    match group {
        Group::Identity => "Identity and reach",
        Group::Capacity => "Capacity",
        Group::Consistency => "Consistency (EC2, IMDS, ipamd, kernel)",
        Group::Cni => "CNI setup",
        Group::Ipamd => "ipamd",
    }
}

/// The report for a person, with ANSI styles (the caller strips them when not a terminal).
pub fn text(report: &Report, heading: &str) -> String {
    let bold = Style::new().bold();
    let mut out = format!("{bold}{heading}{bold:#}\n");
    let width = report
        .findings
        .iter()
        .map(|f| f.check.len())
        .max()
        .unwrap_or(0);
    let mut group = None;
    for f in &report.findings {
        if group != Some(f.group) {
            group = Some(f.group);
            let _ = write!(out, "\n{bold}{}{bold:#}\n", group_name(f.group));
        }
        line(&mut out, f, width);
    }
    let (_, style) = label(match report.verdict {
        super::Verdict::Healthy => Severity::Ok,
        super::Verdict::Degraded => Severity::Warning,
        super::Verdict::Broken => Severity::Error,
    });
    let _ = writeln!(out, "\n{style}{}{style:#}", report.summary);
    out
}

fn line(out: &mut String, f: &Finding, width: usize) {
    let (tag, style) = label(f.severity);
    let indent = " ".repeat(width + 10);
    let _ = writeln!(
        out,
        "  {style}{tag}{style:#}  {:width$}  {}",
        f.check, f.evidence
    );
    if let Some(fix) = &f.fix {
        let _ = writeln!(out, "{indent}fix: {fix}");
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Finding, Group, Report, Severity};
    use super::*;

    fn report() -> Report {
        Report::new(vec![
            Finding::new("imds", Group::Identity, Severity::Ok, "IMDS answers"),
            Finding::new("iam", Group::Identity, Severity::Error, "ec2:X is denied")
                .fix("allow ec2:X"),
        ])
    }

    #[test]
    fn json_has_the_documented_shape() {
        let v: serde_json::Value = serde_json::from_str(&json(&report())).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["verdict"], "broken");
        let f = &v["findings"][0];
        assert_eq!(
            (
                f["check"].as_str(),
                f["group"].as_str(),
                f["severity"].as_str()
            ),
            (Some("iam"), Some("identity"), Some("error"))
        );
        assert_eq!(f["fix"], "allow ec2:X");
        assert_eq!(v["findings"][1]["fix"], serde_json::Value::Null);
        assert!(f.get("repair").is_none());
    }

    #[test]
    fn text_groups_findings_and_ends_with_the_summary() {
        let shown = text(&report(), "doctor");
        let plain = anstream::adapter::strip_str(&shown).to_string();
        assert!(
            plain.contains("Identity and reach\n  FAIL  iam   ec2:X is denied\n"),
            "{plain}"
        );
        assert!(plain.contains("fix: allow ec2:X"));
        assert!(plain.trim_end().ends_with(&report().summary));
    }
}
