//! Where the plugin's log lines go: `pluginLogFile` or stderr, never stdout (stdout carries
//! only the result or error JSON the runtime parses). One JSON object per line, as ipamd's.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::Arc;

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

/// Opens `path` for appending, creating it and its parent directories. Each log line is one
/// `write` on an `O_APPEND` file, so concurrent plugin processes do not interleave lines.
fn open_append(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// Installs the global subscriber. Never fails the request: a bad level falls back to
/// [`DEFAULT_LEVEL`] and an unusable file to stderr, and both are logged as warnings.
pub fn init(file: Option<&str>, level: Option<&str>) {
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
        Some(path) => match open_append(Path::new(path)) {
            Ok(f) => BoxMakeWriter::new(Arc::new(f)),
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
    fn the_log_file_and_its_directories_are_created_and_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/plugin.log");
        {
            use std::io::Write;
            writeln!(open_append(&path).unwrap(), "one").unwrap();
            writeln!(open_append(&path).unwrap(), "two").unwrap();
        }
        assert_eq!(fs::read_to_string(&path).unwrap(), "one\ntwo\n");
    }
}
