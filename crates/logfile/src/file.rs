//! [`RotatingFile`]: appends records to a log file that several processes share, rotating it by
//! size, without ever interleaving or losing a record.
//!
//! Every append, in every process, runs under an exclusive `flock` on `<log>.lock`:
//!
//! 1. take the lock (a mutex first, for the threads of this process: they share one lock file
//!    description, and `flock` does not exclude holders of the same one);
//! 2. `stat` the *path*: another process may have rotated since this one last wrote, so the
//!    size of the file this process has open says nothing;
//! 3. when the file holds something and the record would take it beyond the limit, rotate:
//!    `<log>.<n>` becomes `<log>.<n+1>` from the oldest down, those that would go beyond
//!    the kept number are removed, and `<log>` becomes `<log>.1`;
//! 4. open `<log>` again (`O_APPEND`, created if missing) when it is not the file this process
//!    has open (same device and inode), and write the record in one `write`.
//!
//! A record longer than the limit goes into a file of its own rather than being dropped.
//! Records are appended whole by whoever holds the lock, so readers see complete lines in
//! order, and a rotation never happens between another process's `stat` and its write.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use thiserror::Error;

use crate::Rotation;

/// Why a record could not be appended, or (only [`LogFileError::Rotate`]) could be appended but
/// the file could not be rotated first.
#[derive(Debug, Error)]
pub enum LogFileError {
    /// The log's directory, the lock file or the log itself could not be created or opened.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The lock file could not be locked.
    #[error("cannot lock {path}: {source}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The log's size could not be read.
    #[error("cannot stat {path}: {source}")]
    Stat {
        /// The log.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The record could not be written.
    #[error("cannot write to {path}: {source}")]
    Write {
        /// The log.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The log could not be rotated. The record was still appended, to the unrotated file:
    /// a log that outgrows its limit beats a log that loses lines.
    #[error("cannot rotate {path}: {source} (the log grows past its limit until it can)")]
    Rotate {
        /// The log.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl LogFileError {
    /// Whether the record made it into the log despite the error.
    pub fn record_written(&self) -> bool {
        matches!(self, LogFileError::Rotate { .. })
    }
}

/// The log file this process has open, and which file that is.
struct Current {
    file: File,
    dev: u64,
    ino: u64,
}

/// What appends change, behind the process-wide mutex.
struct State {
    /// The lock file, `None` after a failed unlock dropped it (closing releases the lock).
    lock: Option<File>,
    current: Option<Current>,
}

/// A log file that rotates by size and that any number of processes and threads append to at
/// once, each through its own `RotatingFile` (or threads through a shared one).
pub struct RotatingFile {
    path: PathBuf,
    lock_path: PathBuf,
    rotation: Rotation,
    state: Mutex<State>,
}

impl std::fmt::Debug for RotatingFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RotatingFile")
            .field("path", &self.path)
            .field("rotation", &self.rotation)
            .finish_non_exhaustive()
    }
}

/// `<path><suffix>`, e.g. `plugin.log` + `.1`.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl RotatingFile {
    /// Opens the log at `path` for appending under `rotation`, creating its directory, the
    /// lock file `<path>.lock` beside it, and the log itself when missing. Nothing is rotated
    /// here: a file over the limit rotates on the next append.
    pub fn open(
        path: impl Into<PathBuf>,
        rotation: Rotation,
    ) -> Result<RotatingFile, LogFileError> {
        let path = path.into();
        let open_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| LogFileError::Open { path, source }
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(open_err(dir))?;
        }
        let lock_path = with_suffix(&path, ".lock");
        let lock = open_append(&lock_path).map_err(open_err(&lock_path))?;
        let log = RotatingFile {
            path,
            lock_path,
            rotation,
            state: Mutex::new(State {
                lock: Some(lock),
                current: None,
            }),
        };
        // Open the log now, so that a log that cannot be written is known before the first
        // record (the plugin falls back to stderr, ipamd refuses to start).
        log.locked(|log, current| {
            log.reopen_if_moved(current, fs::metadata(&log.path).ok())
                .map(|_| ())
        })?;
        Ok(log)
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lock file every appender of this log locks: `<log>.lock`.
    pub fn lock_path(&self) -> &Path {
        &self.lock_path
    }

    /// The `n`th rotated file, `<log>.<n>`; `.1` is the newest.
    pub fn rotated_path(&self, n: u32) -> PathBuf {
        with_suffix(&self.path, &format!(".{n}"))
    }

    /// The rotation settings.
    pub fn rotation(&self) -> Rotation {
        self.rotation
    }

    /// Appends `record` (one log line, its newline included) in one write, rotating first when
    /// the file holds something and the record would take it beyond the size limit.
    pub fn append(&self, record: &[u8]) -> Result<(), LogFileError> {
        if record.is_empty() {
            return Ok(());
        }
        self.locked(|log, current| {
            let on_disk = match fs::metadata(&log.path) {
                Ok(meta) => Some(meta),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(source) => {
                    return Err(LogFileError::Stat {
                        path: log.path.clone(),
                        source,
                    });
                }
            };
            let size = on_disk.as_ref().map_or(0, |meta| meta.len());
            let needed = size.saturating_add(record.len() as u64);
            let (rotated, on_disk) = if size > 0 && needed > log.rotation.max_size() {
                // The path names another file now, or none.
                (log.rotate(), fs::metadata(&log.path).ok())
            } else {
                (Ok(()), on_disk)
            };
            let file = log.reopen_if_moved(current, on_disk)?;
            file.write_all(record)
                .map_err(|source| LogFileError::Write {
                    path: log.path.clone(),
                    source,
                })?;
            rotated.map_err(|source| LogFileError::Rotate {
                path: log.path.clone(),
                source,
            })
        })
    }

    /// Runs `f` holding the process's mutex and the exclusive `flock` on the lock file.
    fn locked<T>(
        &self,
        f: impl FnOnce(&Self, &mut Option<Current>) -> Result<T, LogFileError>,
    ) -> Result<T, LogFileError> {
        // A thread that panicked holding the mutex left nothing half-done that matters: the
        // state is re-checked against the path on every append.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let lock_err = |source| LogFileError::Lock {
            path: self.lock_path.clone(),
            source,
        };
        let mut file = match state.lock.take() {
            Some(file) => file,
            None => open_append(&self.lock_path).map_err(|source| LogFileError::Open {
                path: self.lock_path.clone(),
                source,
            })?,
        };
        let guard = loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(guard) => break guard,
                // A signal arrived while waiting for another writer: wait again.
                Err((back, Errno::EINTR)) => file = back,
                Err((back, errno)) => {
                    state.lock = Some(back);
                    return Err(lock_err(io::Error::from(errno)));
                }
            }
        };
        let result = f(self, &mut state.current);
        match guard.unlock() {
            Ok(file) => state.lock = Some(file),
            // Dropping the guard closes the file, which releases the lock; the next append
            // opens it again.
            Err((guard, _)) => drop(guard),
        }
        result
    }

    /// The file at the path, opened again when this process's is another one (rotated away,
    /// or removed) or none. `on_disk` is what the path names now (stat'ed under the lock).
    fn reopen_if_moved<'a>(
        &self,
        current: &'a mut Option<Current>,
        on_disk: Option<fs::Metadata>,
    ) -> Result<&'a mut File, LogFileError> {
        let same = match (current.as_ref(), on_disk) {
            (Some(c), Some(meta)) => c.dev == meta.dev() && c.ino == meta.ino(),
            _ => false,
        };
        match (same, current) {
            (true, Some(c)) => Ok(&mut c.file),
            (_, slot) => {
                let open_err = |source| LogFileError::Open {
                    path: self.path.clone(),
                    source,
                };
                let file = open_append(&self.path).map_err(open_err)?;
                let meta = file.metadata().map_err(open_err)?;
                let opened = slot.insert(Current {
                    file,
                    dev: meta.dev(),
                    ino: meta.ino(),
                });
                Ok(&mut opened.file)
            }
        }
    }

    /// Shifts `<log>.<n>` to `<log>.<n+1>`, newest last, removing those that would go beyond
    /// the kept number (and any left from a larger setting), then `<log>` to `<log>.1`. Only
    /// existing files are touched, found by listing the directory, so the work does not grow
    /// with the setting. Called under the lock.
    fn rotate(&self) -> io::Result<()> {
        let keep = self.rotation.max_files();
        let mut existing = self.rotated_indices()?;
        existing.sort_unstable_by(|a, b| b.cmp(a));
        for n in existing {
            let from = self.rotated_path(n);
            let done = if n >= keep {
                fs::remove_file(&from)
            } else {
                fs::rename(&from, self.rotated_path(n + 1))
            };
            ignore_missing(done)?;
        }
        ignore_missing(fs::rename(&self.path, self.rotated_path(1)))
    }

    /// The `n` of every `<log>.<n>` in the log's directory (`n` written without leading
    /// zeros, as rotation names them).
    fn rotated_indices(&self) -> io::Result<Vec<u32>> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let Some(name) = self.path.file_name().and_then(|n| n.to_str()) else {
            // A name that is not UTF-8 never matches a listed name below; rotate only the log.
            return Ok(Vec::new());
        };
        let prefix = format!("{name}.");
        let mut found = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let listed = entry.file_name();
            let Some(n) = listed
                .to_str()
                .and_then(|l| l.strip_prefix(&prefix))
                .and_then(|digits| {
                    digits
                        .parse::<u32>()
                        .ok()
                        .filter(|n| n.to_string() == digits)
                })
            else {
                continue;
            };
            if n > 0 {
                found.push(n);
            }
        }
        Ok(found)
    }
}

/// A file that is already gone needs no move: someone outside (an operator, logrotate) removed
/// it, which must not stop the log.
fn ignore_missing(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn log_in(dir: &tempfile::TempDir, max_size: u64, max_files: u32) -> RotatingFile {
        let rotation = Rotation::new(max_size, max_files).unwrap();
        RotatingFile::open(dir.path().join("app.log"), rotation).unwrap()
    }

    fn read(path: &Path) -> String {
        fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The files in the log's directory, the lock file left out, sorted.
    fn listing(dir: &tempfile::TempDir) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != "app.log.lock")
            .collect();
        names.sort();
        names
    }

    /// A record of exactly `len` bytes, newline included, that says which it is.
    fn record(id: u32, len: usize) -> Vec<u8> {
        let mut r = format!("{id:04}").into_bytes();
        r.resize(len - 1, b'.');
        r.push(b'\n');
        r
    }

    #[test]
    fn rotates_before_a_record_would_pass_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_in(&dir, 100, 5);
        assert!(log.lock_path().ends_with("app.log.lock"));
        for id in 0..4 {
            log.append(&record(id, 25)).unwrap();
        }
        assert_eq!(
            read(log.path()).len(),
            100,
            "filling to the limit exactly rotates nothing"
        );
        assert_eq!(listing(&dir), ["app.log"]);

        log.append(&record(4, 25)).unwrap();
        assert_eq!(listing(&dir), ["app.log", "app.log.1"]);
        assert_eq!(read(&log.rotated_path(1)).lines().count(), 4);
        assert_eq!(read(log.path()), String::from_utf8(record(4, 25)).unwrap());
    }

    #[test]
    fn keeps_the_newest_rotated_files_and_removes_the_oldest() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_in(&dir, 100, 3);
        // Four records a file: 40 records make 10 files, of which the log and 3 stay.
        for id in 0..40 {
            log.append(&record(id, 25)).unwrap();
        }
        assert_eq!(
            listing(&dir),
            ["app.log", "app.log.1", "app.log.2", "app.log.3"]
        );
        let kept: Vec<u32> = [3, 2, 1]
            .map(|n| read(&log.rotated_path(n)))
            .iter()
            .chain([read(log.path())].iter())
            .flat_map(|text| {
                text.lines()
                    .map(|l| l[..4].parse().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(
            kept,
            (24..40).collect::<Vec<_>>(),
            "the newest 16, oldest first, no gap"
        );
    }

    #[test]
    fn a_record_larger_than_the_limit_gets_a_file_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_in(&dir, 10, 2);
        let big = record(1, 50);
        // Into an empty log: written as it is, no empty rotated file made.
        log.append(&big).unwrap();
        assert_eq!(listing(&dir), ["app.log"]);
        log.append(b"ab\n").unwrap();
        assert_eq!(read(&log.rotated_path(1)).as_bytes(), big);
        assert_eq!(read(log.path()), "ab\n");
        log.append(&big).unwrap();
        assert_eq!(read(&log.rotated_path(1)), "ab\n");
        assert_eq!(read(log.path()).as_bytes(), big);
        assert_eq!(listing(&dir), ["app.log", "app.log.1", "app.log.2"]);
    }

    #[test]
    fn a_writer_follows_a_rotation_made_by_another() {
        let dir = tempfile::tempdir().unwrap();
        let a = log_in(&dir, 20, 5);
        let b = log_in(&dir, 20, 5);
        b.append(b"b1\n").unwrap();
        // a fills the file and rotates it: b's open file is now app.log.1.
        a.append(&record(1, 17)).unwrap();
        a.append(&record(2, 17)).unwrap();
        assert_eq!(
            read(&a.rotated_path(1)),
            format!("b1\n{}", String::from_utf8(record(1, 17)).unwrap())
        );
        b.append(b"b2\n").unwrap();
        assert_eq!(
            read(b.path()),
            format!("{}b2\n", String::from_utf8(record(2, 17)).unwrap()),
            "b wrote to the file at the path, not to the one it had open"
        );
        assert_eq!(read(&a.rotated_path(1)).lines().count(), 2);
    }

    #[test]
    fn a_log_moved_or_removed_from_outside_is_created_again() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_in(&dir, 1000, 5);
        log.append(b"one\n").unwrap();
        fs::rename(log.path(), dir.path().join("moved")).unwrap();
        log.append(b"two\n").unwrap();
        fs::remove_file(log.path()).unwrap();
        log.append(b"three\n").unwrap();
        assert_eq!(read(&dir.path().join("moved")), "one\n");
        assert_eq!(read(log.path()), "three\n");
    }

    #[test]
    fn rotated_files_beyond_a_smaller_setting_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        for n in [1, 2, 5, 9] {
            fs::write(dir.path().join(format!("app.log.{n}")), "old\n").unwrap();
        }
        // Not ours: another name, a leading zero.
        fs::write(dir.path().join("app.log.07"), "x").unwrap();
        fs::write(dir.path().join("app.log.gz"), "x").unwrap();
        let log = log_in(&dir, 4, 2);
        log.append(b"new\n").unwrap();
        log.append(b"newer\n").unwrap();
        assert_eq!(
            listing(&dir),
            [
                "app.log",
                "app.log.07",
                "app.log.1",
                "app.log.2",
                "app.log.gz"
            ]
        );
        assert_eq!(read(&log.rotated_path(1)), "new\n");
        assert_eq!(read(&log.rotated_path(2)), "old\n");
    }

    #[test]
    fn a_failed_rotation_still_writes_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_in(&dir, 4, 1);
        log.append(b"one\n").unwrap();
        // app.log.1 is a non-empty directory: neither removed nor replaced by a rename.
        fs::create_dir_all(log.rotated_path(1).join("x")).unwrap();
        let e = log.append(b"two\n").unwrap_err();
        assert!(matches!(e, LogFileError::Rotate { .. }), "{e:?}");
        assert!(e.record_written());
        assert!(e.to_string().contains("app.log"), "{e}");
        assert_eq!(read(log.path()), "one\ntwo\n");
    }

    #[test]
    fn an_unusable_place_is_an_error_at_open() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("file"), "").unwrap();
        let e =
            RotatingFile::open(dir.path().join("file/app.log"), Rotation::default()).unwrap_err();
        assert!(matches!(e, LogFileError::Open { .. }), "{e:?}");
        assert!(!e.record_written());
        // The directories are created.
        let nested = dir.path().join("a/b/app.log");
        let log = RotatingFile::open(&nested, Rotation::default()).unwrap();
        assert!(nested.exists() && log.lock_path().exists());
    }

    #[test]
    fn threads_sharing_an_appender_and_with_their_own_lose_no_record() {
        const THREADS: u32 = 6;
        const EACH: u32 = 500;
        let dir = tempfile::tempdir().unwrap();
        let shared = Arc::new(log_in(&dir, 512, 10_000));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                // Half share one appender (one lock file description: the mutex orders them),
                // half open their own (flock orders them).
                let log = if t % 2 == 0 {
                    Arc::clone(&shared)
                } else {
                    Arc::new(log_in(&dir, 512, 10_000))
                };
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        let line = format!("t{t} {i} {}\n", "x".repeat((i % 40) as usize));
                        log.append(line.as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let mut seen = std::collections::BTreeSet::new();
        for name in listing(&dir) {
            let text = read(&dir.path().join(&name));
            assert!(text.len() <= 512, "{name} is {} bytes", text.len());
            for line in text.lines() {
                let mut words = line.split(' ');
                let (t, i) = (words.next().unwrap(), words.next().unwrap());
                let i: u32 = i.parse().unwrap();
                assert_eq!(line, format!("{t} {i} {}", "x".repeat((i % 40) as usize)));
                assert!(seen.insert((t.to_string(), i)), "{line} twice");
            }
        }
        assert_eq!(seen.len(), (THREADS * EACH) as usize);
    }

    #[test]
    fn each_tracing_event_is_one_record() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_in(&dir, 400, 100);
        let path = log.path().to_path_buf();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(log)
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..50 {
                tracing::info!(i, padding = %"p".repeat(i * 3), "event");
            }
        });
        let mut seen = Vec::new();
        for name in listing(&dir) {
            let text = read(&dir.path().join(&name));
            assert!(text.len() <= 400, "{name}: {} bytes", text.len());
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                seen.push(v["fields"]["i"].as_u64().unwrap());
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..50).collect::<Vec<_>>());
        assert!(
            fs::metadata(with_suffix(&path, ".3")).is_ok(),
            "rotated several times"
        );
    }
}
