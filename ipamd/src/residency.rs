//! Gives the kernel back the pages of ipamd's own executable once the start is over.
//!
//! The kernel maps an executable in as it runs, 64 KiB and more at a time, and keeps what it
//! mapped: the code only the start runs (configuration, IMDS, the AWS and Kubernetes clients'
//! set-up, recovery) stays resident for the daemon's whole life. ipamd's functions are linked in
//! the order the daemon runs them (`ipamd/build.rs`), working code first; after the start, this
//! module asks the kernel to reclaim every page of the executable (`MADV_PAGEOUT`), and the
//! working code comes back as it runs, from a region of its own, while the rest stays on disk
//! (docs/reports/memory-profile.md).
//!
//! The executable is flushed first: a page the kernel has not written back yet cannot be
//! reclaimed, and a node starts ipamd moments after its image was unpacked. Only mappings of
//! the executable that are not writable are advised, so nothing ipamd wrote is touched; their
//! contents are the file's, which the kernel reads again when they are next used.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::ptr::NonNull;

use nix::sys::mman::{MmapAdvise, madvise};
use nix::sys::stat::{major, minor};
use thiserror::Error;

/// Where the kernel lists a process's own mappings, and names its executable.
const MAPS: &str = "/proc/self/maps";
const EXE: &str = "/proc/self/exe";

/// Why the pages could not be given back.
#[derive(Debug, Error)]
pub enum ResidencyError {
    /// `/proc/self/exe` or `/proc/self/maps` could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: &'static str,
        /// Why.
        source: io::Error,
    },
    /// No mapping of the executable was found: nothing to advise.
    #[error("{MAPS} lists no mapping of the executable {path} (device {dev}, inode {ino})")]
    NotMapped {
        /// The executable's device, `major:minor` in hex as the maps file writes it.
        dev: String,
        /// Its inode.
        ino: u64,
        /// Its path.
        path: String,
    },
    /// The kernel refused the advice (before Linux 5.4 it has no `MADV_PAGEOUT`).
    #[error("madvise(MADV_PAGEOUT) on {start:#x}-{end:#x}: {source}")]
    Advise {
        /// The mapping's first address.
        start: usize,
        /// Its end.
        end: usize,
        /// Why.
        source: nix::Error,
    },
}

/// What [`release_startup_pages`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The mappings of the executable that were advised.
    pub mappings: usize,
    /// Their size in bytes.
    pub bytes: usize,
    /// Whether the executable could be flushed first (a read-only file system cannot, and
    /// has no unwritten pages to flush).
    pub flushed: bool,
}

/// One line of the maps file that maps a file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    writable: bool,
    /// `major:minor` as the maps file writes it (hex).
    dev: String,
    ino: u64,
    path: String,
}

/// Reads one line of `/proc/<pid>/maps`: `start-end perms offset dev inode [path]`. `None` for a
/// line that maps no file (inode 0) or does not have that form.
fn parse_mapping(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (field, after) = trimmed.split_at(end);
        rest = after;
        Some(field).filter(|f| !f.is_empty())
    };
    let (start, end) = field()?.split_once('-')?;
    let perms = field()?;
    let _offset = field()?;
    let dev = field()?.to_string();
    let ino = field()?.parse::<u64>().ok().filter(|&ino| ino != 0)?;
    Some(Mapping {
        start: usize::from_str_radix(start, 16).ok()?,
        end: usize::from_str_radix(end, 16).ok()?,
        writable: perms.as_bytes().get(1) == Some(&b'w'),
        dev,
        ino,
        // The path may hold spaces; the kernel pads before it, and marks a replaced file.
        path: rest.trim_start().trim_end_matches(" (deleted)").to_string(),
    })
}

/// The executable as the process sees it, to find its mappings by: device and inode, and path.
/// On overlayfs (a container's root) some kernels list the lower file's device and inode in the
/// maps file, others the overlay's; the path is the same in both.
struct Executable {
    dev: String,
    ino: u64,
    path: String,
}

/// The mappings of the executable in a maps listing that ipamd never writes to.
fn read_only_mappings_of(maps: &str, exe: &Executable) -> Vec<Mapping> {
    maps.lines()
        .filter_map(parse_mapping)
        .filter(|m| !m.writable)
        .filter(|m| {
            (m.ino == exe.ino && m.dev == exe.dev) || (!exe.path.is_empty() && m.path == exe.path)
        })
        .collect()
}

/// Flushes ipamd's executable and asks the kernel to reclaim every page of its read-only
/// mappings. Call it once the start is over; it takes milliseconds and the pages that are run
/// again are mapped in again as they are.
pub fn release_startup_pages() -> Result<Released, ResidencyError> {
    let read = |path| move |source| ResidencyError::Read { path, source };
    let exe = File::open(EXE).map_err(read(EXE))?;
    let meta = exe.metadata().map_err(read(EXE))?;
    // A dirty page is written back before it can be reclaimed, and reclaim does not wait for
    // that; on a read-only file system there is nothing to write.
    let flushed = exe.sync_data().is_ok();
    let exe = Executable {
        dev: format!("{:02x}:{:02x}", major(meta.dev()), minor(meta.dev())),
        ino: meta.ino(),
        path: fs::read_link(EXE)
            .map(|p| {
                p.to_string_lossy()
                    .trim_end_matches(" (deleted)")
                    .to_string()
            })
            .unwrap_or_default(),
    };
    let maps = fs::read_to_string(MAPS).map_err(read(MAPS))?;
    let mappings = read_only_mappings_of(&maps, &exe);
    if mappings.is_empty() {
        return Err(ResidencyError::NotMapped {
            dev: exe.dev,
            ino: exe.ino,
            path: exe.path,
        });
    }
    let mut bytes = 0;
    for m in &mappings {
        let Some(addr) = NonNull::new(m.start as *mut std::ffi::c_void) else {
            continue;
        };
        let len = m.end - m.start;
        #[allow(unsafe_code)]
        // SAFETY: the range is a whole mapping of this process, read from its own maps file,
        // of its executable and not writable. MADV_PAGEOUT only reclaims: it neither unmaps the
        // range nor changes what reading it gives, which the kernel reads from the file again.
        // A mapping that went away since the maps file was read makes the call fail with
        // ENOMEM, not misbehave.
        unsafe { madvise(addr, len, MmapAdvise::MADV_PAGEOUT) }.map_err(|source| {
            ResidencyError::Advise {
                start: m.start,
                end: m.end,
                source,
            }
        })?;
        bytes += len;
    }
    Ok(Released {
        mappings: mappings.len(),
        bytes,
        flushed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS_SAMPLE: &str = "\
5581859ba000-558185a3a000 r--p 00000000 fe:00 10018829                   /app/ipamd
558185a3a000-5581860be000 r--p 00080000 fe:00 10018829                   /app/ipamd
5581860be000-55818719c000 r-xp 00683000 fe:00 10018829                   /app/ipamd
55818719c000-558187288000 r--p 01760000 fe:00 10018829                   /app/ipamd
558187288000-5581872a0000 rw-p 0184c000 fe:00 10018829                   /app/ipamd
5581b817c000-5581b83b3000 rw-p 00000000 00:00 0                          [heap]
7f440b187000-7f440b2dd000 r-xp 00026000 fe:00 326279                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f440b2dd000-7f440b330000 r--p 0017c000 fe:01 10018829                   /other/device/same/inode
";

    fn ipamd(dev: &str, ino: u64, path: &str) -> Executable {
        Executable {
            dev: dev.into(),
            ino,
            path: path.into(),
        }
    }

    #[test]
    fn the_executables_read_only_mappings_are_found_and_nothing_else() {
        let found = read_only_mappings_of(MAPS_SAMPLE, &ipamd("fe:00", 10018829, "/app/ipamd"));
        let ranges: Vec<(usize, usize)> = found.iter().map(|m| (m.start, m.end)).collect();
        assert_eq!(
            ranges,
            [
                (0x5581859ba000, 0x558185a3a000),
                (0x558185a3a000, 0x5581860be000),
                (0x5581860be000, 0x55818719c000),
                (0x55818719c000, 0x558187288000),
            ],
            "the writable data mapping, the heap, libc and another device's inode are left out"
        );
    }

    #[test]
    fn a_mapping_listed_under_another_device_is_found_by_its_path() {
        // overlayfs: the maps file names the lower file's device and inode.
        let maps = "1000-3000 r-xp 00000000 00:2f 77 /app/ipamd\n4000-5000 r--p 00000000 00:2f 78 /app/ipamd2\n";
        let found = read_only_mappings_of(maps, &ipamd("00:35", 12, "/app/ipamd"));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].start, 0x1000);
    }

    #[test]
    fn lines_without_a_file_or_of_another_shape_are_skipped() {
        assert_eq!(
            parse_mapping("7f43d8000000-7f43d83e7000 rw-p 00000000 00:00 0"),
            None
        );
        assert_eq!(parse_mapping("not a mapping"), None);
        assert_eq!(parse_mapping(""), None);
        assert_eq!(
            parse_mapping("zz-10 r-xp 0 fe:00 12 /x"),
            None,
            "an address that is not hex"
        );
        let m =
            parse_mapping("1000-3000 r-xp 00000000 fe:00 12      /opt/my bin/x (deleted)").unwrap();
        assert_eq!(
            (m.start, m.end, m.writable, m.ino),
            (0x1000, 0x3000, false, 12)
        );
        assert_eq!(m.path, "/opt/my bin/x");
    }

    #[test]
    fn this_process_gives_back_its_own_executables_pages() {
        // The test binary stands in for ipamd: its text is reclaimed and mapped in again as
        // the test goes on running, which it does.
        let released = release_startup_pages().unwrap();
        assert!(released.mappings >= 2, "{released:?}");
        assert!(released.bytes > 0, "{released:?}");
    }
}
