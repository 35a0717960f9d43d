//! The bridge to tracing-subscriber: `fmt().with_writer(rotating_file)`. The fmt layer asks
//! for a writer per event and writes the formatted line into it, in as many `write` calls as
//! it likes; [`RecordWriter`] collects them and appends the whole line as one record when the
//! layer drops it, so a line is never split across a rotation or between two processes.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use tracing_subscriber::fmt::MakeWriter;

use crate::{LogFileError, RotatingFile};

/// One event's line on its way into a [`RotatingFile`].
#[derive(Debug)]
pub struct RecordWriter<'a> {
    log: &'a RotatingFile,
    line: Vec<u8>,
}

impl Write for RecordWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    /// Nothing to do: the line is appended once complete, when the writer is dropped.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for RecordWriter<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.log.append(&self.line) {
            report(&e, &self.line);
        }
    }
}

/// Whether a failure has been reported on stderr yet: once per process is enough to tell the
/// operator, and a log that cannot be written must not double every line with the same note.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// A log that cannot be written has nowhere to say so but stderr (the runtime's log for the
/// plugin, the container's for ipamd). The line goes there too, unless it made it into the
/// file, so nothing is lost.
fn report(e: &LogFileError, line: &[u8]) {
    let mut stderr = io::stderr().lock();
    if !REPORTED.swap(true, Ordering::Relaxed) {
        let _ = writeln!(stderr, "log file: {e}");
    }
    if !e.record_written() {
        let _ = stderr.write_all(line);
    }
}

impl<'a> MakeWriter<'a> for RotatingFile {
    type Writer = RecordWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        RecordWriter {
            log: self,
            line: Vec::new(),
        }
    }
}
