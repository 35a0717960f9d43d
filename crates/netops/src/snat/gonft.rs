//! Removing what the Go CNI's native nftables connmark backend left behind.
//!
//! On nf_tables nodes recent Go CNIs mark outbound pod connections with a table of their own
//! (`table ip aws-cni`, a nat-hook chain at priority -90) instead of `AWS-CONNMARK-CHAIN-0`.
//! After a switch to us that table would keep marking next to our chain, and keep doing so
//! after external SNAT is turned on, so it goes, as the Go CNI's iptables backend removes it.

use std::io;

use super::error::{Result, SnatError};
use super::runner::{Runner, command_line, run_ok};

/// The Go CNI's nftables table (family `ip`).
pub const GO_NFT_TABLE: &str = "aws-cni";

/// Deletes `table ip aws-cni` if it exists; true when it did. Without the `nft` tool, or
/// when it cannot talk to nf_tables, there is nothing this could have created, so that is
/// not an error.
pub(crate) fn remove_go_nft_table(runner: &(impl Runner + ?Sized)) -> Result<bool> {
    let args = ["list", "tables", "ip"];
    let out = match runner.run("nft", &args, None) {
        Ok(out) => out,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(SnatError::Spawn {
                command: command_line("nft", &args),
                source,
            });
        }
    };
    let wanted = format!("table ip {GO_NFT_TABLE}");
    let present = out.status.success()
        && String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim() == wanted);
    if present {
        run_ok(
            runner,
            "nft",
            &["delete", "table", "ip", GO_NFT_TABLE],
            None,
        )?;
    }
    Ok(present)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{ExitStatus, Output};

    use super::*;

    struct Nft {
        tables: &'static str,
        calls: RefCell<Vec<String>>,
    }

    impl Runner for Nft {
        fn run(&self, program: &str, args: &[&str], _: Option<&[u8]>) -> io::Result<Output> {
            self.calls.borrow_mut().push(command_line(program, args));
            Ok(Output {
                status: ExitStatus::from_raw(0),
                stdout: if args[0] == "list" {
                    self.tables.as_bytes().to_vec()
                } else {
                    Vec::new()
                },
                stderr: Vec::new(),
            })
        }
    }

    struct Missing;

    impl Runner for Missing {
        fn run(&self, _: &str, _: &[&str], _: Option<&[u8]>) -> io::Result<Output> {
            Err(io::ErrorKind::NotFound.into())
        }
    }

    #[test]
    fn deletes_only_the_go_table() {
        let r = Nft {
            tables: "table ip nat\ntable ip aws-cni\n",
            calls: RefCell::default(),
        };
        assert!(remove_go_nft_table(&r).unwrap());
        assert_eq!(
            *r.calls.borrow(),
            ["nft list tables ip", "nft delete table ip aws-cni"]
        );
        let r = Nft {
            tables: "table ip nat\ntable ip aws-cni-other\n",
            calls: RefCell::default(),
        };
        assert!(!remove_go_nft_table(&r).unwrap());
        assert_eq!(r.calls.borrow().len(), 1);
    }

    #[test]
    fn no_nft_tool_is_nothing_to_do() {
        assert!(!remove_go_nft_table(&Missing).unwrap());
    }
}
