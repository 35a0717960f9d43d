//! `ipamd entrypoint`: the DaemonSet's entrypoint installs the plugins into the host, runs
//! ipamd, and writes the conflist into the host once ipamd serves (the runtime reads a
//! conflist as "network ready").

use std::path::PathBuf;

use anyhow::Context;
use ipamd::install::{self, CONFLIST_NAME, ConflistSettings};
use tracing::{info, warn};

/// Where the entrypoint installs from and to.
#[derive(clap::Args, Clone)]
pub struct Install {
    /// The plugin binaries to install (every file in the directory).
    #[arg(long, env = "VPC_CNI_PLUGINS_DIR", default_value = "/app/cni-bin")]
    pub plugins: PathBuf,
    /// The conflist template.
    #[arg(
        long,
        env = "VPC_CNI_CONFLIST",
        default_value = "/app/10-vpc-cni.conflist"
    )]
    pub conflist: PathBuf,
    /// The host's CNI bin directory.
    #[arg(long, env = "HOST_CNI_BIN_PATH", default_value = "/host/opt/cni/bin")]
    pub bin_dir: PathBuf,
    /// The host's CNI conf directory.
    #[arg(
        long,
        env = "HOST_CNI_CONFDIR_PATH",
        default_value = "/host/etc/cni/net.d"
    )]
    pub conf_dir: PathBuf,
}

/// The conflist to write once ipamd serves.
pub struct PendingConflist {
    dir: PathBuf,
    content: String,
}

/// Installs the plugins and renders the conflist (written later, once ipamd serves).
pub fn prepare(install: Install) -> anyhow::Result<PendingConflist> {
    let settings = ConflistSettings::from_env(|k| std::env::var(k).ok())?;
    let template = std::fs::read_to_string(&install.conflist).with_context(|| {
        format!(
            "reading the conflist template {}",
            install.conflist.display()
        )
    })?;
    let content = install::render_conflist(&template, &settings)?;
    info!(
        from = %install.plugins.display(), to = %install.bin_dir.display(),
        "Copying CNI plugin binaries ..."
    );
    let installed = install::install_plugins(&install.plugins, &install.bin_dir)?;
    info!(?installed, "installed the CNI plugins");
    Ok(PendingConflist {
        dir: install.conf_dir,
        content,
    })
}

/// Writes the conflist: from now on the runtime sends pods to vpc-cni.
pub fn write_conflist(pending: &PendingConflist) -> anyhow::Result<()> {
    info!("Copying config file ... ");
    if let Some(retired) = install::retire_go_cni_conflist(&pending.dir)? {
        warn!(
            "moved the Go CNI's conflist aside to {}: it would sort first and send pods to aws-cni",
            retired.display()
        );
    }
    let path = pending.dir.join(CONFLIST_NAME);
    if install::write_if_changed(
        &pending.dir,
        CONFLIST_NAME,
        pending.content.as_bytes(),
        0o644,
    )? {
        info!(
            "Successfully copied CNI plugin binary and config file. ({})",
            path.display()
        );
    } else {
        info!(
            "Successfully copied CNI plugin binary; the config file was already current ({})",
            path.display()
        );
    }
    Ok(())
}
