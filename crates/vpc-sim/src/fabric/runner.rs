//! Running `ip` and `sysctl`: the seam that lets the command sequence be checked without root.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use super::FabricError;

/// Runs one command (argv), optionally with text on its standard input.
pub trait Runner {
    /// Runs `argv`; an error carries the command line and its stderr.
    fn run(&mut self, argv: &[String]) -> Result<(), FabricError>;

    /// Runs `argv` with `input` on its standard input (`ip -batch -`).
    fn run_with_input(&mut self, argv: &[String], input: &str) -> Result<(), FabricError>;
}

/// Runs commands for real.
#[derive(Debug, Default)]
pub struct CommandRunner;

fn split(argv: &[String]) -> Result<(String, &String, &[String]), FabricError> {
    let command = argv.join(" ");
    match argv.split_first() {
        Some((prog, args)) => Ok((command, prog, args)),
        None => Err(FabricError::Spawn {
            command,
            source: std::io::Error::other("empty command"),
        }),
    }
}

fn check(command: String, out: Output) -> Result<(), FabricError> {
    if out.status.success() {
        Ok(())
    } else {
        Err(FabricError::Failed {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

impl Runner for CommandRunner {
    fn run(&mut self, argv: &[String]) -> Result<(), FabricError> {
        let (command, prog, args) = split(argv)?;
        tracing::debug!(%command, "fabric");
        let out = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| FabricError::Spawn {
                command: command.clone(),
                source,
            })?;
        check(command, out)
    }

    fn run_with_input(&mut self, argv: &[String], input: &str) -> Result<(), FabricError> {
        let (command, prog, args) = split(argv)?;
        tracing::debug!(%command, lines = input.lines().count(), "fabric batch");
        let spawn_err = |source| FabricError::Spawn {
            command: command.clone(),
            source,
        };
        let mut child = Command::new(prog)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_err)?;
        let stdin = child.stdin.take();
        // Written from a second thread so a child that stops reading (ip -batch quits at the
        // first failed line) and fills its stderr cannot deadlock us; a broken pipe then is
        // expected and the exit status tells what happened.
        let out = std::thread::scope(|s| {
            s.spawn(move || {
                if let Some(mut stdin) = stdin {
                    let _ = stdin.write_all(input.as_bytes());
                }
            });
            child.wait_with_output()
        })
        .map_err(spawn_err)?;
        check(command, out)
    }
}
