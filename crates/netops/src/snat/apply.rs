//! Bringing the node's iptables to the desired rules without disturbing anything else.

use super::config::NodeNetConfig;
use super::error::{Result, SnatError};
use super::plan::{Change, plan_table};
use super::rules::{Table, desired_rules};
use super::runner::{Backend, Runner, command_line, run_ok};
use super::save::{TableState, parse_save};

/// What [`apply`] changed, for the logs; empty when everything was already in place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Every chain and rule added or removed, in the order it was done.
    pub changes: Vec<Change>,
}

impl ApplyReport {
    /// True when nothing had to change.
    pub fn is_unchanged(&self) -> bool {
        self.changes.is_empty()
    }
}

/// Seconds iptables-restore waits for the xtables lock.
const XTABLES_WAIT_SECS: &str = "10";

/// Makes the nat and mangle tables of `backend` hold exactly our rules for `cfg`.
///
/// Idempotent and minimal: each table is read with `<backend>-save -t <table>`, compared
/// with [`desired_rules`] in canonical text, and only the difference is written, in one
/// `<backend>-restore -w 10 --noflush` transaction per table (see the plan module for how a
/// chain is edited). A table already in the desired state is not written at all, so every
/// rule and counter stays as it was. Only our rules are touched: those in our
/// `AWS-SNAT-CHAIN-<n>` / `AWS-CONNMARK-CHAIN-<n>` chains, and those elsewhere that carry one
/// of our comments or jump to one of our chains.
///
/// After writing, the table is read again and must now match; if it does not (an iptables
/// that prints some rule differently than we expect), this fails with
/// [`SnatError::NotConverged`] rather than piling up duplicates.
///
/// `iptables-save` takes no lock (`-w` is not one of its options); with nf_tables a dump is
/// one consistent netlink transaction, and a rule changed by someone else between our read
/// and write is at worst fixed by the next call, as our deletes name rules by text (in shared
/// chains) and we alone write our chains.
pub fn apply(
    runner: &(impl Runner + ?Sized),
    backend: Backend,
    cfg: &NodeNetConfig,
) -> Result<ApplyReport> {
    cfg.validate()?;
    let desired = desired_rules(cfg);
    let mut report = ApplyReport::default();
    for wanted in &desired.tables {
        let current = read_table(runner, backend, wanted.table)?;
        let plan = plan_table(&current, wanted);
        if plan.is_empty() {
            continue;
        }
        run_ok(
            runner,
            backend.restore_program(),
            // Bounded: another program holding the xtables lock for long must not hang ipamd's
            // startup; the error names the command.
            &["-w", XTABLES_WAIT_SECS, "--noflush"],
            Some(plan.restore_input().as_bytes()),
        )?;
        let after = read_table(runner, backend, wanted.table)?;
        let again = plan_table(&after, wanted);
        if !again.is_empty() {
            return Err(SnatError::NotConverged {
                table: wanted.table.name(),
                remaining: again.changes.iter().map(ToString::to_string).collect(),
            });
        }
        report.changes.extend(plan.changes);
    }
    Ok(report)
}

/// What [`apply`] would change now, without changing anything: an empty list when the nat and
/// mangle tables hold exactly our rules for `cfg`.
pub fn pending(
    runner: &(impl Runner + ?Sized),
    backend: Backend,
    cfg: &NodeNetConfig,
) -> Result<Vec<Change>> {
    cfg.validate()?;
    let mut changes = Vec::new();
    for wanted in &desired_rules(cfg).tables {
        let current = read_table(runner, backend, wanted.table)?;
        changes.extend(plan_table(&current, wanted).changes);
    }
    Ok(changes)
}

/// One table as the backend's `-save` shows it.
pub(crate) fn read_table(
    runner: &(impl Runner + ?Sized),
    backend: Backend,
    table: Table,
) -> Result<TableState> {
    let args = ["-t", table.name()];
    let text = run_ok(runner, backend.save_program(), &args, None)?;
    parse_save(&text, table, &command_line(backend.save_program(), &args))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::{HashMap, VecDeque};
    use std::io;
    use std::net::Ipv4Addr;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{ExitStatus, Output};

    use super::*;

    /// Answers each command line with the next of its recorded outputs (the last one
    /// repeats) and records what was run and fed to it.
    #[derive(Default)]
    struct Recorded {
        answers: RefCell<HashMap<String, VecDeque<(i32, String)>>>,
        calls: RefCell<Vec<(String, Option<String>)>>,
    }

    impl Recorded {
        fn answer(self, command: &str, code: i32, stdout: &str) -> Self {
            self.answers
                .borrow_mut()
                .entry(command.to_string())
                .or_default()
                .push_back((code, stdout.to_string()));
            self
        }

        fn calls(&self) -> Vec<String> {
            self.calls.borrow().iter().map(|(c, _)| c.clone()).collect()
        }

        fn inputs(&self) -> Vec<String> {
            self.calls
                .borrow()
                .iter()
                .filter_map(|(_, i)| i.clone())
                .collect()
        }
    }

    impl Runner for Recorded {
        fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> io::Result<Output> {
            let key = command_line(program, args);
            self.calls.borrow_mut().push((
                key.clone(),
                stdin.map(|s| String::from_utf8_lossy(s).into_owned()),
            ));
            let mut answers = self.answers.borrow_mut();
            let queue = answers
                .get_mut(&key)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, key.clone()))?;
            let (code, out) = if queue.len() > 1 {
                queue.pop_front().unwrap_or_default()
            } else {
                queue.front().cloned().unwrap_or_default()
            };
            Ok(Output {
                status: ExitStatus::from_raw(code << 8),
                stdout: out.into_bytes(),
                stderr: b"iptables-restore: line 3 failed\n".to_vec(),
            })
        }
    }

    fn cfg() -> NodeNetConfig {
        NodeNetConfig::new(
            "eth0",
            Ipv4Addr::new(10, 0, 0, 10),
            vec!["10.0.0.0/16".parse().unwrap()],
        )
    }

    /// A save dump holding exactly the desired rules of `table`, plus `extra` lines.
    fn dump(cfg: &NodeNetConfig, table: Table, extra: &[&str]) -> String {
        let set = desired_rules(cfg);
        let mut s = format!(
            "# Generated by iptables-save v1.8.9 (nf_tables) on Sun Nov 22 13:43:40 2026\n*{table}\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n"
        );
        for c in &set.table(table).unwrap().chains {
            if c.name.starts_with("AWS-") {
                s.push_str(&format!(":{} - [0:0]\n", c.name));
            }
        }
        for l in extra {
            s.push_str(l);
            s.push('\n');
        }
        for l in set.save_lines(table) {
            s.push_str(&l);
            s.push('\n');
        }
        s.push_str("COMMIT\n# Completed on Sun Nov 22 13:43:40 2026\n");
        s
    }

    const NAT: &str = "iptables-nft-save -t nat";
    const MANGLE: &str = "iptables-nft-save -t mangle";
    const RESTORE: &str = "iptables-nft-restore -w 10 --noflush";

    #[test]
    fn converged_node_is_only_read() {
        let c = cfg();
        let r = Recorded::default()
            .answer(
                NAT,
                0,
                &dump(&c, Table::Nat, &["-A POSTROUTING -j KUBE-POSTROUTING"]),
            )
            .answer(MANGLE, 0, &dump(&c, Table::Mangle, &[]));
        let report = apply(&r, Backend::Nft, &c).unwrap();
        assert!(report.is_unchanged());
        assert_eq!(r.calls(), vec![NAT, MANGLE]);
    }

    #[test]
    fn stale_rule_is_removed_in_one_restore_and_checked() {
        let c = cfg();
        let stale = r#"-A AWS-SNAT-CHAIN-0 -d 172.16.0.0/12 -m comment --comment "AWS SNAT CHAIN" -j RETURN"#;
        let before = dump(&c, Table::Nat, &[stale]);
        let after = dump(&c, Table::Nat, &[]);
        let r = Recorded::default()
            .answer(NAT, 0, &before)
            .answer(NAT, 0, &after)
            .answer(MANGLE, 0, &dump(&c, Table::Mangle, &[]))
            .answer(RESTORE, 0, "");
        let report = apply(&r, Backend::Nft, &c).unwrap();
        assert_eq!(r.calls(), vec![NAT, RESTORE, NAT, MANGLE]);
        assert_eq!(r.inputs(), vec!["*nat\n-D AWS-SNAT-CHAIN-0 1\nCOMMIT\n"]);
        assert_eq!(
            report
                .changes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec![format!("nat: removed {stale}")]
        );
    }

    #[test]
    fn legacy_backend_uses_legacy_programs() {
        let c = NodeNetConfig {
            external_snat: true,
            node_port_support: false,
            ..cfg()
        };
        let r = Recorded::default()
            .answer(
                "iptables-legacy-save -t nat",
                0,
                "*nat\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n",
            )
            .answer(
                "iptables-legacy-save -t mangle",
                0,
                "*mangle\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n",
            );
        assert!(apply(&r, Backend::Legacy, &c).unwrap().is_unchanged());
    }

    #[test]
    fn rules_printed_differently_are_an_error_not_a_loop() {
        let c = cfg();
        let empty = "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n";
        // This "iptables" accepted the script but still shows nothing.
        let r = Recorded::default()
            .answer(NAT, 0, empty)
            .answer(RESTORE, 0, "");
        let err = apply(&r, Backend::Nft, &c).unwrap_err();
        assert!(
            matches!(err, SnatError::NotConverged { table: "nat", .. }),
            "{err}"
        );
        assert!(err.to_string().contains("still differs"), "{err}");
    }

    #[test]
    fn failures_name_the_command() {
        let c = cfg();
        let r = Recorded::default()
            .answer(NAT, 0, "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n")
            .answer(RESTORE, 1, "");
        let err = apply(&r, Backend::Nft, &c).unwrap_err().to_string();
        assert_eq!(
            err,
            "iptables-nft-restore -w 10 --noflush: exit status: 1: iptables-restore: line 3 failed"
        );

        let r = Recorded::default().answer(NAT, 0, "garbage\n");
        let err = apply(&r, Backend::Nft, &c).unwrap_err().to_string();
        assert!(
            err.starts_with("iptables-nft-save -t nat: cannot parse line 1"),
            "{err}"
        );

        let bad = NodeNetConfig {
            connmark: 0,
            ..cfg()
        };
        let r = Recorded::default();
        assert!(apply(&r, Backend::Nft, &bad).is_err());
        assert!(r.calls().is_empty(), "validated before running anything");
    }
}
