//! Log setup from AWS_VPC_K8S_CNI_LOGLEVEL / AWS_VPC_K8S_CNI_LOG_FILE.

use std::fs::{self, OpenOptions};
use std::io::IsTerminal;
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogTarget};

/// Installs the global subscriber. Our crates log at the configured level; dependencies (the
/// AWS SDK, hyper) only at warn, or a DEBUG setting would drown the pool's lines.
pub fn init(config: &Config) -> std::io::Result<()> {
    let level = &config.log_level;
    let filter = EnvFilter::new(format!(
        "warn,ipamd={level},pool={level},store={level},cloud={level}"
    ));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match &config.log_target {
        LogTarget::Stdout => builder
            .with_ansi(std::io::stdout().is_terminal())
            .with_writer(std::io::stdout)
            .init(),
        LogTarget::Stderr => builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .init(),
        LogTarget::File(path) => {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            let file = OpenOptions::new().create(true).append(true).open(path)?;
            builder
                .with_ansi(false)
                .with_writer(Mutex::new(file))
                .init();
        }
    }
    Ok(())
}
