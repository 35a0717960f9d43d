//! `vpc-cni`: the CNI plugin. The runtime runs it once per verb with `CNI_*` variables and the
//! request configuration on stdin; it prints the result or error JSON on stdout, and nothing
//! else ever goes there (logs go to `pluginLogFile` or stderr).

mod errors;
mod logging;
mod names;
mod prev;
mod result;
mod selfns;
mod verbs;

use std::io::{self, Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;

use cni::{
    CniError, CniVersion, Command, Invocation, NetConf, about_message, about_requested,
    parse_version_request, version_reply,
};

/// The first line skel-style plugins print when run without `CNI_COMMAND`.
const ABOUT: &str = concat!(
    "vpc-cni ",
    env!("CARGO_PKG_VERSION"),
    ": VPC-native pod networking (AWS VPC CNI compatible), addresses from ipamd"
);

/// A variable of the process environment; non-UTF-8 values are kept (lossily) rather than
/// reported as missing.
fn env(key: &str) -> Option<String> {
    std::env::var_os(key).map(|v| v.to_string_lossy().into_owned())
}

fn main() -> ExitCode {
    if about_requested(env) {
        eprint!("{}", about_message(ABOUT));
        return ExitCode::SUCCESS;
    }
    let invocation = Invocation::from_env(env);
    if let Ok(inv) = &invocation
        && inv.command == Command::Version
    {
        // Like skel: the reply does not depend on stdin, so it is not read.
        return print(&version_reply(), ExitCode::SUCCESS);
    }

    let mut stdin = Vec::new();
    if let Err(e) = io::stdin().lock().read_to_end(&mut stdin) {
        let err = CniError::io_failure(format!("error reading the network config from stdin: {e}"));
        return fail(&err, None);
    }
    let inv = match invocation {
        Ok(inv) => inv,
        Err(e) => return fail(&e, stdin_version(&stdin)),
    };
    let conf = match NetConf::parse(&stdin, inv.command) {
        Ok(conf) => conf,
        Err(e) => return fail(&e, stdin_version(&stdin)),
    };
    logging::init(&conf);

    let version = conf.cni_version;
    let outcome = catch_unwind(AssertUnwindSafe(|| verbs::run(&inv, &conf))).unwrap_or_else(|_| {
        Err(CniError::internal(
            "vpc-cni panicked; see its log (stderr or pluginLogFile)",
        ))
    });
    match outcome {
        Ok(Some(result)) => print(&result.to_json_string(version), ExitCode::SUCCESS),
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => fail(&e, Some(version)),
    }
}

/// The config's `cniVersion` when it is one we speak, for error replies before the config
/// could be validated.
fn stdin_version(stdin: &[u8]) -> Option<CniVersion> {
    parse_version_request(stdin).and_then(|v| CniVersion::parse(&v))
}

/// Prints the error JSON and returns the failure exit status.
fn fail(err: &CniError, version: Option<CniVersion>) -> ExitCode {
    print(
        &err.to_json(version.map(CniVersion::as_str)),
        ExitCode::FAILURE,
    )
}

fn print(json: &str, code: ExitCode) -> ExitCode {
    let mut out = io::stdout().lock();
    match writeln!(out, "{json}").and_then(|()| out.flush()) {
        Ok(()) => code,
        // The runtime went away; nobody is left to read a result.
        Err(_) => ExitCode::FAILURE,
    }
}
