//! Log setup from AWS_VPC_K8S_CNI_LOGLEVEL / AWS_VPC_K8S_CNI_LOG_FILE: one JSON object per
//! line (`timestamp`, `level`, `message`, fields, `target`), as the Go CNI writes JSON lines,
//! so log shippers keep parsing them and greps for its wording keep matching. A file rotates
//! by size (AWS_VPC_K8S_CNI_LOG_MAX_SIZE, AWS_VPC_K8S_CNI_LOG_MAX_FILES) as the Go CNI's
//! does, through [`logfile`], the appender the plugin uses too.

use logfile::{LogFileError, RotatingFile};
use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogTarget};

/// Installs the global subscriber. Our crates log at the configured level; dependencies (the
/// AWS SDK, hyper) only at warn, or a DEBUG setting would drown the pool's lines.
pub fn init(config: &Config) -> Result<(), LogFileError> {
    let level = &config.log_level;
    let filter = EnvFilter::new(format!(
        "warn,ipamd={level},pool={level},store={level},cloud={level}"
    ));
    let builder = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_env_filter(filter);
    match &config.log_target {
        LogTarget::Stdout => builder.with_writer(std::io::stdout).init(),
        LogTarget::Stderr => builder.with_writer(std::io::stderr).init(),
        LogTarget::File(path) => {
            let file = RotatingFile::open(path, config.log_rotation)?;
            builder.with_writer(file).init();
        }
    }
    Ok(())
}
