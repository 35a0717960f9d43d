//! Log files that rotate by size while several processes append to them: the plugin's
//! `pluginLogFile` (one short-lived `vpc-cni` process per CNI call, many at once) and ipamd's
//! `AWS_VPC_K8S_CNI_LOG_FILE`. The Go CNI rotates both with lumberjack at 100 MB, keeping 5
//! old files, and operators expect the same; [`Rotation::default`] is that.
//!
//! Why our own: the crates that rotate log files (file-rotate, rolling-file,
//! tracing-appender's rolling module) each assume one process owns the file. Two plugin
//! processes rotating at once with them would rename each other's files and write into
//! renamed ones, losing or misplacing lines; tracing-appender also rotates only by time.
//! Here every record is appended under an `flock` shared by all writers, which re-check the
//! file at the path each time (see [`RotatingFile`]).
//!
//! - [`RotatingFile::open`] and [`RotatingFile::append`]: the appender;
//! - `RotatingFile` is a tracing-subscriber `MakeWriter`: each event is one record;
//! - [`parse_size`] (`1048576`, `512Ki`, `100Mi`, `1Gi`) and [`parse_max_files`]: the syntax
//!   of every setting of the limits, and [`Rotation`], the validated pair.
#![warn(missing_docs)]

mod file;
mod limits;
mod writer;

pub use file::{LogFileError, RotatingFile};
pub use limits::{
    DEFAULT_MAX_FILES, DEFAULT_MAX_SIZE, LimitError, Rotation, parse_max_files, parse_size,
};
pub use writer::RecordWriter;
