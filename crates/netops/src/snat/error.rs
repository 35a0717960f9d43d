//! Why setting up the node's SNAT, connmark and fwmark networking failed.

use std::io;

/// Result alias of the [`crate::snat`] module.
pub type Result<T, E = SnatError> = std::result::Result<T, E>;

/// Why node networking setup failed. Every variant names the command, file or value involved.
#[derive(Debug, thiserror::Error)]
pub enum SnatError {
    /// A value of [`super::NodeNetConfig`] cannot be used.
    #[error("invalid {what}: {why}")]
    Invalid {
        /// Which field.
        what: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A program could not be started (typically: not installed).
    #[error("{command}: cannot run: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A program ran and failed.
    #[error("{command}: {status}: {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// How it exited.
        status: String,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },
    /// The output of `iptables-save` could not be understood.
    #[error("{command}: cannot parse line {line} of its output ({text:?}): {why}")]
    Parse {
        /// The command line.
        command: String,
        /// 1-based line number.
        line: usize,
        /// The offending line.
        text: String,
        /// What was wrong with it.
        why: String,
    },
    /// After applying, the table still differs from the desired rules: this iptables prints
    /// some rule differently from the canonical text we expect, so comparing cannot work.
    #[error(
        "iptables table {table} still differs from the desired rules after applying them \
         (does this iptables version print them differently?); still to do: {}",
        .remaining.join("; ")
    )]
    NotConverged {
        /// The table.
        table: &'static str,
        /// The operations a second pass would still do.
        remaining: Vec<String>,
    },
    /// Which iptables backend the node uses could not be determined.
    #[error("cannot tell which iptables backend the node uses: {0}")]
    Backend(String),
    /// A netlink or namespace operation (the fwmark rule, entering the node's namespace)
    /// failed.
    #[error(transparent)]
    Netops(#[from] crate::NetlinkError),
    /// Reading or writing a sysctl failed.
    #[error("sysctl {path}: {source}")]
    Sysctl {
        /// The /proc/sys path.
        path: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}
