//! Where the plugin's log lines go: `pluginLogFile` or stderr, never stdout (stdout carries
//! only the result or error JSON the runtime parses). One JSON object per line, as ipamd's.
//! The file rotates by size (`pluginLogMaxSize`, `pluginLogMaxFiles`) as the Go CNI's does;
//! [`logfile`] makes that safe with many plugin processes writing at once.

use std::io;

use cni::NetConf;
use logfile::{DEFAULT_MAX_FILES, DEFAULT_MAX_SIZE, RotatingFile, Rotation};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// The level when `pluginLogLevel` is absent.
pub const DEFAULT_LEVEL: LevelFilter = LevelFilter::INFO;

/// Parses a `pluginLogLevel`: the Go CNI's names (`Debug`, `Info`, `Warn`, `Error`) in any
/// case, plus `trace` and `warning`. `None` for anything else.
pub fn parse_level(name: &str) -> Option<LevelFilter> {
    Some(match name.trim().to_ascii_lowercase().as_str() {
        "trace" => LevelFilter::TRACE,
        "debug" => LevelFilter::DEBUG,
        "info" => LevelFilter::INFO,
        "warn" | "warning" => LevelFilter::WARN,
        "error" => LevelFilter::ERROR,
        _ => return None,
    })
}

/// The rotation `pluginLogMaxSize` and `pluginLogMaxFiles` ask for, each read by the syntax
/// ipamd and the entrypoint use. A value that cannot be used falls back to the default (100 MiB,
/// 5 files) with a warning: a logging setting never fails a request.
fn rotation(
    max_size: Option<&str>,
    max_files: Option<&str>,
    warnings: &mut Vec<String>,
) -> Rotation {
    let max_size = max_size.map_or(DEFAULT_MAX_SIZE, |v| {
        logfile::parse_size(v).unwrap_or_else(|e| {
            warnings.push(format!(
                "pluginLogMaxSize {v:?}: {e}: using {DEFAULT_MAX_SIZE} bytes"
            ));
            DEFAULT_MAX_SIZE
        })
    });
    let max_files = max_files.map_or(DEFAULT_MAX_FILES, |v| {
        logfile::parse_max_files(v).unwrap_or_else(|e| {
            warnings.push(format!(
                "pluginLogMaxFiles {v:?}: {e}: using {DEFAULT_MAX_FILES}"
            ));
            DEFAULT_MAX_FILES
        })
    });
    // Both are valid by now; the default is the answer should that ever change.
    Rotation::new(max_size, max_files).unwrap_or_default()
}

/// Installs the global subscriber from the conf's logging keys. Never fails the request: a bad
/// level falls back to [`DEFAULT_LEVEL`], bad rotation settings to the defaults and an
/// unusable file to stderr, and each is logged as a warning.
pub fn init(conf: &NetConf) {
    let (file, level) = (
        conf.plugin_log_file.as_deref(),
        conf.plugin_log_level.as_deref(),
    );
    let mut warnings = Vec::new();
    let max_level = match level {
        None => DEFAULT_LEVEL,
        Some(name) => parse_level(name).unwrap_or_else(|| {
            warnings.push(format!(
                "unknown pluginLogLevel {name:?} (expected Debug, Info, Warn or Error): using info"
            ));
            DEFAULT_LEVEL
        }),
    };
    let writer = match file.filter(|f| !f.is_empty()) {
        // The Go CNI's names for the streams. stdout carries the result, so never logs.
        None => BoxMakeWriter::new(io::stderr),
        Some(stream) if stream.eq_ignore_ascii_case("stderr") => BoxMakeWriter::new(io::stderr),
        Some(stream) if stream.eq_ignore_ascii_case("stdout") => {
            warnings.push(
                "pluginLogFile stdout would corrupt the result the runtime reads: logging to stderr"
                    .to_string(),
            );
            BoxMakeWriter::new(io::stderr)
        }
        Some(path) => match RotatingFile::open(
            path,
            rotation(
                conf.plugin_log_max_size.as_deref(),
                conf.plugin_log_max_files.as_deref(),
                &mut warnings,
            ),
        ) {
            Ok(f) => BoxMakeWriter::new(f),
            Err(e) => {
                warnings.push(format!(
                    "cannot open pluginLogFile {path}: {e}; logging to stderr"
                ));
                BoxMakeWriter::new(io::stderr)
            }
        },
    };
    // Only fails if a subscriber is already set, which main never does twice.
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(writer)
        .with_max_level(max_level)
        .with_ansi(false)
        .with_target(false)
        .try_init();
    for warning in warnings {
        tracing::warn!("{warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_cni_level_names_are_accepted_in_any_case() {
        for (name, want) in [
            ("Debug", LevelFilter::DEBUG),
            ("DEBUG", LevelFilter::DEBUG),
            ("info", LevelFilter::INFO),
            ("Info", LevelFilter::INFO),
            ("Warn", LevelFilter::WARN),
            ("warning", LevelFilter::WARN),
            ("ERROR", LevelFilter::ERROR),
            ("trace", LevelFilter::TRACE),
        ] {
            assert_eq!(parse_level(name), Some(want), "{name}");
        }
        assert_eq!(parse_level("verbose"), None);
        assert_eq!(parse_level(""), None);
    }

    #[test]
    fn rotation_settings_are_read_in_the_shared_syntax() {
        let mut warnings = Vec::new();
        let r = rotation(Some("1048576"), Some("3"), &mut warnings);
        assert_eq!((r.max_size(), r.max_files()), (1 << 20, 3));
        let r = rotation(Some("64Ki"), None, &mut warnings);
        assert_eq!((r.max_size(), r.max_files()), (65536, 5));
        assert_eq!(rotation(None, None, &mut warnings), Rotation::default());
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn bad_rotation_settings_fall_back_to_the_defaults_with_a_warning() {
        let mut warnings = Vec::new();
        let r = rotation(Some("100MB"), Some("0"), &mut warnings);
        assert_eq!(r, Rotation::default());
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("pluginLogMaxSize \"100MB\""),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with("pluginLogMaxFiles \"0\""),
            "{warnings:?}"
        );
    }
}
