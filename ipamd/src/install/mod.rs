//! Node installation by `ipamd entrypoint`: the plugin binaries and the rendered conflist
//! written onto the host ([`files`]), and the conflist rendered from the environment
//! ([`conflist`]).

mod conflist;
mod files;

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

pub use conflist::{
    CONFLIST_NAME, ConflistSettings, DEFAULT_PLUGIN_LOG_FILE, GO_CNI_CONFLIST, PLUGIN_TYPE,
    RETIRED_GO_CNI_CONFLIST, render_conflist,
};
pub use files::{install_plugins, retire_go_cni_conflist, write_if_changed};

/// An installation step that failed; each names the path or variable involved.
#[derive(Debug, Error)]
pub enum InstallError {
    /// A directory that must already exist does not (the hostPath mount is missing).
    #[error("directory {} does not exist (is the host path mounted?)", path.display())]
    MissingDir {
        /// The directory.
        path: PathBuf,
    },
    /// A path that must be a directory is something else.
    #[error("{} is not a directory", path.display())]
    NotADir {
        /// The path.
        path: PathBuf,
    },
    /// A file system operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done ("copying to", "renaming into place", ...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// A file name that would escape its directory or is empty.
    #[error("{name:?} is not a plain file name (writing into {})", dir.display())]
    BadName {
        /// The directory.
        dir: PathBuf,
        /// The name.
        name: String,
    },
    /// An environment variable with a value the conflist cannot carry.
    #[error("{var}={value:?}: {problem}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        problem: String,
    },
    /// The conflist template is unusable.
    #[error("conflist template: {problem}")]
    Template {
        /// What is wrong.
        problem: String,
    },
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> InstallError + use<> {
    let path = path.to_path_buf();
    move |source| InstallError::Io { op, path, source }
}
