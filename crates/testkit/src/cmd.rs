//! Commands a test runs: always bounded in time, and asserted where they must succeed.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The bound on a command that should take a moment (`ip`, `sysctl`, `iptables`).
pub const QUICK_SECS: u32 = 30;

/// Runs `program args`, killed after `secs` seconds (coreutils `timeout`), with `stdin` on its
/// standard input; returns what it did, whatever that was.
pub fn run_bounded(secs: u32, program: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.arg(secs.to_string()).arg(program).args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {program}: {e}"));
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        // A program may exit without reading all of it; its exit status says what happened.
        let _ = pipe.write_all(data);
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {program}: {e}"))
}

/// Runs `argv` (bounded by [`QUICK_SECS`]), panicking with its stderr unless it succeeds;
/// returns its standard output.
pub fn run(argv: &[&str]) -> String {
    let (program, args) = argv.split_first().expect("a program to run");
    succeeded(argv, run_bounded(QUICK_SECS, program, args, None))
}

/// The standard output of `out`, the run of `argv`; panics with its stderr unless it
/// succeeded.
pub fn succeeded(argv: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "{argv:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Where `command` is on PATH.
pub fn which(command: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|p| p.is_file())
}

/// Panics, naming what is missing, unless every command is on PATH: a root test that cannot
/// run must fail loudly, never pass. Tests never install anything themselves; scripts/test.sh
/// installs `package` before it runs them.
pub fn require_commands(commands: &[&str], package: &str) {
    let missing: Vec<&str> = commands
        .iter()
        .copied()
        .filter(|c| which(c).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "missing {missing:?}: install the Debian package {package} (scripts/test.sh does, as root)"
    );
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Uid:")
                    .map(|u| u.split_whitespace().next() == Some("0"))
            })
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_runs_with_its_input_and_is_checked() {
        let out = run_bounded(5, "cat", &[], Some(b"through"));
        assert_eq!(out.stdout, b"through");
        assert_eq!(run(&["echo", "out"]), "out\n");
    }

    #[test]
    #[should_panic(expected = "failed")]
    fn a_failing_command_panics() {
        run(&["false"]);
    }

    #[test]
    #[should_panic(expected = "install the Debian package no-such-package")]
    fn a_missing_command_is_named() {
        require_commands(&["sh", "no-such-command-here"], "no-such-package");
    }
}
