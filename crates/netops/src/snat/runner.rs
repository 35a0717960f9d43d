//! Running the iptables programs, and telling which iptables backend the node uses.

use std::io::{self, Write};
use std::process::{Command, Output, Stdio};

use super::error::{Result, SnatError};

/// Runs an external program; the seam tests replace.
pub trait Runner {
    /// Runs `program` with `args`, feeding `stdin` if given, and returns how it ended and
    /// what it printed. A non-zero exit is not an `Err` here; callers judge it.
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> io::Result<Output>;
}

impl<R: Runner + ?Sized> Runner for &R {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> io::Result<Output> {
        (**self).run(program, args, stdin)
    }
}

/// Runs programs with [`std::process::Command`], in the caller's namespaces.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemRunner;

impl Runner for SystemRunner {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> io::Result<Output> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let input = child.stdin.take();
        // Feed stdin from another thread while this one drains stdout/stderr, so neither side
        // can block on a full pipe.
        std::thread::scope(|s| {
            let writer = match (input, stdin) {
                (Some(mut pipe), Some(data)) => Some(s.spawn(move || pipe.write_all(data))),
                _ => None,
            };
            let output = child.wait_with_output();
            if let Some(w) = writer {
                match w.join() {
                    Ok(Ok(())) => {}
                    // The program exiting before reading everything shows in its status.
                    Ok(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe => {}
                    Ok(Err(e)) => return Err(e),
                    Err(_) => return Err(io::Error::other("stdin writer thread panicked")),
                }
            }
            output
        })
    }
}

/// Runs a command that must succeed and returns its stdout.
pub(crate) fn run_ok(
    runner: &(impl Runner + ?Sized),
    program: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<String> {
    let command = command_line(program, args);
    let out = runner
        .run(program, args, stdin)
        .map_err(|source| SnatError::Spawn {
            command: command.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(SnatError::Failed {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn command_line(program: &str, args: &[&str]) -> String {
    std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Which of the two iptables implementations the node's rules live in. They are separate
/// rule sets in the kernel: writing to the one kube-proxy and kubelet do not use leaves our
/// rules evaluated in an order nobody planned (reference §8, problem 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// iptables over nf_tables (`iptables-nft`, the default of current distributions).
    Nft,
    /// The legacy x_tables backend (`iptables-legacy`).
    Legacy,
}

impl Backend {
    /// `iptables-nft-save` / `iptables-legacy-save`.
    pub fn save_program(self) -> &'static str {
        match self {
            Self::Nft => "iptables-nft-save",
            Self::Legacy => "iptables-legacy-save",
        }
    }

    /// `iptables-nft-restore` / `iptables-legacy-restore`.
    pub fn restore_program(self) -> &'static str {
        match self {
            Self::Nft => "iptables-nft-restore",
            Self::Legacy => "iptables-legacy-restore",
        }
    }

    /// `nft` / `legacy`, as `iptables --version` says it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nft => "nft",
            Self::Legacy => "legacy",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Chains kubelet (1.17+) creates in the mangle table of the backend it uses, as a hint
/// for containers that must agree with it.
const KUBELET_HINT_CHAINS: [&str; 2] = [":KUBE-IPTABLES-HINT ", ":KUBE-KUBELET-CANARY "];

/// Tells which backend the node uses, the way Kubernetes' iptables-wrapper does (the Go
/// CNI's image delegates to it), so our rules land next to kubelet's and kube-proxy's:
///
/// 1. dump both backends (`iptables-legacy-save`, `iptables-nft-save`, without `-t`: they
///    then list only existing tables and create nothing); a backend whose dump fails or is
///    not installed counts as empty;
/// 2. a backend holding kubelet's hint chain (`KUBE-IPTABLES-HINT`, or `KUBE-KUBELET-CANARY`)
///    wins, if only one does;
/// 3. otherwise the backend with more rules wins, if either has any;
/// 4. otherwise (a fresh node or namespace) the one `iptables --version` names:
///    `(nf_tables)` or `(legacy)`; a version without either suffix predates 1.8 and is legacy.
pub fn detect_backend(runner: &(impl Runner + ?Sized)) -> Result<Backend> {
    let legacy = dump(runner, Backend::Legacy);
    let nft = dump(runner, Backend::Nft);
    let hinted = |text: &Option<String>| {
        text.as_deref().is_some_and(|t| {
            t.lines()
                .any(|l| KUBELET_HINT_CHAINS.iter().any(|h| l.starts_with(h)))
        })
    };
    match (hinted(&legacy), hinted(&nft)) {
        (true, false) => return Ok(Backend::Legacy),
        (false, true) => return Ok(Backend::Nft),
        _ => {}
    }
    let count = |text: &Option<String>| {
        text.as_deref().map_or(0, |t| {
            t.lines()
                .filter(|l| l.starts_with("-A ") || (l.starts_with('[') && l.contains("] -A ")))
                .count()
        })
    };
    let (n_legacy, n_nft) = (count(&legacy), count(&nft));
    if n_legacy > n_nft {
        return Ok(Backend::Legacy);
    }
    if n_nft > n_legacy {
        return Ok(Backend::Nft);
    }
    let version = run_ok(runner, "iptables", &["--version"], None)?;
    parse_version(&version)
}

fn dump(runner: &(impl Runner + ?Sized), backend: Backend) -> Option<String> {
    run_ok(runner, backend.save_program(), &[], None).ok()
}

/// Reads `iptables v1.8.9 (nf_tables)` / `iptables v1.8.7 (legacy)` / `iptables v1.6.1`.
fn parse_version(out: &str) -> Result<Backend> {
    let line = out.lines().next().unwrap_or_default().trim();
    if !line.starts_with("iptables v") {
        return Err(SnatError::Backend(format!(
            "`iptables --version` printed {line:?}"
        )));
    }
    if line.contains("(nf_tables)") {
        Ok(Backend::Nft)
    } else {
        Ok(Backend::Legacy)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::*;

    /// Answers each command line from a table; unknown programs are "not installed".
    struct Canned(HashMap<String, (i32, String)>);

    impl Runner for Canned {
        fn run(&self, program: &str, args: &[&str], _stdin: Option<&[u8]>) -> io::Result<Output> {
            let key = command_line(program, args);
            let (code, out) = self
                .0
                .get(&key)
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
            Ok(Output {
                status: ExitStatus::from_raw(code << 8),
                stdout: out.clone().into_bytes(),
                stderr: b"boom\n".to_vec(),
            })
        }
    }

    fn canned(entries: &[(&str, i32, &str)]) -> Canned {
        Canned(
            entries
                .iter()
                .map(|(k, c, o)| (k.to_string(), (*c, o.to_string())))
                .collect(),
        )
    }

    const V_NFT: (&str, i32, &str) = ("iptables --version", 0, "iptables v1.8.9 (nf_tables)\n");
    const V_LEGACY: (&str, i32, &str) = ("iptables --version", 0, "iptables v1.8.7 (legacy)\n");

    #[test]
    fn empty_node_follows_iptables_version() {
        let r = canned(&[
            V_NFT,
            ("iptables-legacy-save", 0, ""),
            ("iptables-nft-save", 0, ""),
        ]);
        assert_eq!(detect_backend(&r).unwrap(), Backend::Nft);
        let r = canned(&[V_LEGACY]);
        assert_eq!(detect_backend(&r).unwrap(), Backend::Legacy);
        let r = canned(&[("iptables --version", 0, "iptables v1.6.1\n")]);
        assert_eq!(detect_backend(&r).unwrap(), Backend::Legacy);
    }

    #[test]
    fn kubelet_hint_wins_over_rule_counts_and_version() {
        let legacy_with_rules =
            "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j A\n-A INPUT -j B\nCOMMIT\n";
        let nft_hinted = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n";
        let r = canned(&[
            V_LEGACY,
            ("iptables-legacy-save", 0, legacy_with_rules),
            ("iptables-nft-save", 0, nft_hinted),
        ]);
        assert_eq!(detect_backend(&r).unwrap(), Backend::Nft);
        let r = canned(&[
            V_NFT,
            (
                "iptables-legacy-save",
                0,
                "*mangle\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n",
            ),
            ("iptables-nft-save", 0, ""),
        ]);
        assert_eq!(detect_backend(&r).unwrap(), Backend::Legacy);
    }

    #[test]
    fn more_rules_win_without_a_hint() {
        let r = canned(&[
            V_NFT,
            (
                "iptables-legacy-save",
                0,
                "*nat\n[0:0] -A POSTROUTING -j X\nCOMMIT\n",
            ),
            ("iptables-nft-save", 0, ""),
        ]);
        assert_eq!(detect_backend(&r).unwrap(), Backend::Legacy);
        // A failing dump counts as empty.
        let r = canned(&[
            V_LEGACY,
            (
                "iptables-legacy-save",
                1,
                "*nat\n-A POSTROUTING -j X\n-A POSTROUTING -j Y\n",
            ),
            (
                "iptables-nft-save",
                0,
                "*nat\n-A POSTROUTING -j X\nCOMMIT\n",
            ),
        ]);
        assert_eq!(detect_backend(&r).unwrap(), Backend::Nft);
    }

    #[test]
    fn no_iptables_at_all_is_a_clear_error() {
        let err = detect_backend(&canned(&[])).unwrap_err().to_string();
        assert!(err.starts_with("iptables --version: cannot run"), "{err}");
        let err = detect_backend(&canned(&[("iptables --version", 0, "nft v1.0.6\n")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot tell which iptables backend"), "{err}");
    }

    #[test]
    fn system_runner_feeds_stdin_and_reports_failure() {
        let out = SystemRunner
            .run("cat", &[], Some(b"hello\n"))
            .expect("cat runs");
        assert!(out.status.success());
        assert_eq!(out.stdout, b"hello\n");
        // Larger than a pipe buffer both ways.
        let big = vec![b'x'; 1 << 20];
        let out = SystemRunner.run("cat", &[], Some(&big)).unwrap();
        assert_eq!(out.stdout.len(), big.len());

        let err = run_ok(&SystemRunner, "sh", &["-c", "echo nope >&2; exit 3"], None)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "sh -c echo nope >&2; exit 3: exit status: 3: nope");
        let err = run_ok(&SystemRunner, "/nonexistent/prog", &[], None)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("/nonexistent/prog: cannot run: "), "{err}");
    }
}
