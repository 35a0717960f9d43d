//! The file steps of node installation: the plugin binaries into the host's CNI bin directory,
//! the rendered conflist into its conf directory, and the Go CNI's conflist out of the way.
//!
//! Every file is written beside its target and renamed over it, so a container runtime that
//! execs a plugin or reads a conflist at any moment sees either the old file or the new one,
//! never a half-written one. Renaming also replaces the inode, so a plugin binary that is being
//! executed does not make the copy fail with ETXTBSY.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::conflist::{GO_CNI_CONFLIST, RETIRED_GO_CNI_CONFLIST};
use super::{InstallError, io_err};

/// Fails unless `dir` is an existing directory.
fn require_dir(dir: &Path) -> Result<(), InstallError> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(InstallError::NotADir {
            path: dir.to_path_buf(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(InstallError::MissingDir {
            path: dir.to_path_buf(),
        }),
        Err(e) => Err(io_err("checking", dir)(e)),
    }
}

/// Removes the temporary file unless it was renamed into place.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Writes `dir/name` atomically: `dir/.<name>.tmp-<pid>` gets the content, `mode` and an
/// fsync, is renamed over `dir/name`, and the directory is fsynced so the rename survives a
/// crash. `write` produces the content. Returns the final path.
fn replace_file(
    dir: &Path,
    name: &OsStr,
    mode: u32,
    write: impl FnOnce(&mut File, &Path) -> Result<(), InstallError>,
) -> Result<PathBuf, InstallError> {
    let target = dir.join(name);
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp_path = dir.join(tmp_name);

    // A leftover from an earlier run that died mid-copy: in a container the pid is often the
    // same on every start, so the name is ours to reuse.
    match fs::remove_file(&tmp_path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("removing stale temporary file", &tmp_path)(e)),
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp_path)
        .map_err(io_err("creating", &tmp_path))?;
    let mut guard = TempFile {
        path: tmp_path,
        armed: true,
    };
    write(&mut file, &guard.path)?;
    // Explicitly, because the creation mode is filtered by the umask.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err("setting the mode of", &guard.path))?;
    file.sync_all().map_err(io_err("syncing", &guard.path))?;
    drop(file);
    fs::rename(&guard.path, &target).map_err(io_err("renaming into place", &target))?;
    guard.armed = false;
    sync_dir(dir)?;
    Ok(target)
}

fn sync_dir(dir: &Path) -> Result<(), InstallError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("syncing directory", dir))
}

/// Copies every regular file in `src_dir` (symbolic links are followed; directories and other
/// kinds are left out) into `dst_dir`, each atomically (see the module doc) with the source's
/// permission bits. `dst_dir` must exist: it is the host's CNI bin directory mounted into the
/// pod, and creating it would hide a missing mount. Returns the installed paths, sorted.
pub fn install_plugins(src_dir: &Path, dst_dir: &Path) -> Result<Vec<PathBuf>, InstallError> {
    require_dir(src_dir)?;
    require_dir(dst_dir)?;
    let mut sources = Vec::new();
    for item in fs::read_dir(src_dir).map_err(io_err("listing", src_dir))? {
        let item = item.map_err(io_err("listing", src_dir))?;
        let path = item.path();
        let meta = fs::metadata(&path).map_err(io_err("inspecting", &path))?;
        if meta.is_file() {
            sources.push((item.file_name(), path, meta.permissions().mode() & 0o777));
        }
    }
    sources.sort();

    let mut installed = Vec::with_capacity(sources.len());
    for (name, src, mode) in sources {
        let target = replace_file(dst_dir, &name, mode, |tmp, tmp_path| {
            let mut from = File::open(&src).map_err(io_err("opening", &src))?;
            io::copy(&mut from, tmp).map_err(io_err("copying to", tmp_path))?;
            Ok(())
        })?;
        installed.push(target);
    }
    Ok(installed)
}

/// Writes `content` to `dir/name` atomically with permission bits `mode`. `dir` must exist;
/// `name` must be a plain file name.
pub fn write_atomically(
    dir: &Path,
    name: &str,
    content: &[u8],
    mode: u32,
) -> Result<PathBuf, InstallError> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(InstallError::BadName {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        });
    }
    require_dir(dir)?;
    replace_file(
        dir,
        OsStr::from_bytes(name.as_bytes()),
        mode,
        |tmp, tmp_path| tmp.write_all(content).map_err(io_err("writing", tmp_path)),
    )
}

/// Like [`write_atomically`], but leaves `dir/name` alone when it already holds `content` with
/// permission bits `mode`. Returns whether it wrote. A DaemonSet restart or upgrade then
/// leaves an unchanged conflist untouched: the runtime, which watches the directory, sees no
/// event and reloads nothing.
pub fn write_if_changed(
    dir: &Path,
    name: &str,
    content: &[u8],
    mode: u32,
) -> Result<bool, InstallError> {
    let target = dir.join(name);
    let same = match fs::read(&target) {
        Ok(old) => {
            let perm = fs::metadata(&target)
                .map_err(io_err("inspecting", &target))?
                .permissions()
                .mode();
            old == content && perm & 0o7777 == mode
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(io_err("reading", &target)(e)),
    };
    if same {
        return Ok(false);
    }
    write_atomically(dir, name, content, mode)?;
    Ok(true)
}

/// Renames `conf_dir/10-aws.conflist` to `10-aws.conflist.replaced-by-vpc-cni` (replacing an
/// older retired copy) and returns the new path; `Ok(None)` when there is none.
///
/// Why: the runtime uses the first conflist in sort order, and `10-aws.conflist` sorts before
/// [`CONFLIST_NAME`], so it would keep calling `aws-cni`, whose daemon is gone.
pub fn retire_go_cni_conflist(conf_dir: &Path) -> Result<Option<PathBuf>, InstallError> {
    let old = conf_dir.join(GO_CNI_CONFLIST);
    match fs::symlink_metadata(&old) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("inspecting", &old)(e)),
    }
    let new = conf_dir.join(RETIRED_GO_CNI_CONFLIST);
    fs::rename(&old, &new).map_err(io_err("retiring the Go CNI conflist to", &new))?;
    sync_dir(conf_dir)?;
    Ok(Some(new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::CONFLIST_NAME;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn plugins_are_copied_byte_for_byte_with_their_mode() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let binary: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        fs::write(src.path().join("vpc-cni"), &binary).unwrap();
        fs::set_permissions(
            src.path().join("vpc-cni"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        fs::write(src.path().join("README"), b"notes").unwrap();
        fs::set_permissions(src.path().join("README"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::create_dir(src.path().join("subdir")).unwrap();

        let installed = install_plugins(src.path(), dst.path()).unwrap();
        assert_eq!(
            installed,
            [dst.path().join("README"), dst.path().join("vpc-cni")]
        );
        assert_eq!(fs::read(dst.path().join("vpc-cni")).unwrap(), binary);
        assert_eq!(mode(&dst.path().join("vpc-cni")), 0o755);
        assert_eq!(fs::read(dst.path().join("README")).unwrap(), b"notes");
        assert_eq!(mode(&dst.path().join("README")), 0o640);
        // No temporary files, no directory copied.
        assert_eq!(names(dst.path()), ["README", "vpc-cni"]);
    }

    #[test]
    fn a_second_install_replaces_the_file_and_its_inode() {
        use std::os::unix::fs::MetadataExt;
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        fs::write(src.path().join("vpc-cni"), b"version 1").unwrap();
        install_plugins(src.path(), dst.path()).unwrap();
        let target = dst.path().join("vpc-cni");
        let first_inode = fs::metadata(&target).unwrap().ino();
        // Someone still holds the old binary open (a running plugin).
        let held = File::open(&target).unwrap();

        fs::write(src.path().join("vpc-cni"), b"version 2, longer").unwrap();
        fs::set_permissions(
            src.path().join("vpc-cni"),
            fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        install_plugins(src.path(), dst.path()).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"version 2, longer");
        assert_eq!(mode(&target), 0o700);
        assert_ne!(fs::metadata(&target).unwrap().ino(), first_inode);
        assert_eq!(held.metadata().unwrap().ino(), first_inode);
        assert_eq!(names(dst.path()), ["vpc-cni"]);
    }

    #[test]
    fn a_stale_temporary_file_of_ours_is_replaced() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        fs::write(src.path().join("vpc-cni"), b"new").unwrap();
        let stale = dst
            .path()
            .join(format!(".vpc-cni.tmp-{}", std::process::id()));
        fs::write(&stale, b"half a binary").unwrap();
        install_plugins(src.path(), dst.path()).unwrap();
        assert_eq!(fs::read(dst.path().join("vpc-cni")).unwrap(), b"new");
        assert_eq!(names(dst.path()), ["vpc-cni"]);
    }

    #[test]
    fn missing_directories_are_named() {
        let src = tempfile::tempdir().unwrap();
        let base = tempfile::tempdir().unwrap();
        let missing = base.path().join("opt/cni/bin");
        let e = install_plugins(src.path(), &missing).unwrap_err();
        assert!(matches!(e, InstallError::MissingDir { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains(&missing.display().to_string()), "{text}");
        assert!(text.contains("does not exist"), "{text}");
        assert!(!missing.exists());

        let e = install_plugins(&missing, src.path()).unwrap_err();
        assert!(e.to_string().contains(&missing.display().to_string()));

        let file = base.path().join("file");
        fs::write(&file, b"").unwrap();
        let e = install_plugins(src.path(), &file).unwrap_err();
        assert!(matches!(e, InstallError::NotADir { .. }), "{e:?}");
    }

    #[test]
    fn write_atomically_sets_content_and_mode_and_rejects_paths() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_atomically(dir.path(), CONFLIST_NAME, b"{}", 0o644).unwrap();
        assert_eq!(path, dir.path().join(CONFLIST_NAME));
        assert_eq!(fs::read(&path).unwrap(), b"{}");
        assert_eq!(mode(&path), 0o644);
        let path = write_atomically(dir.path(), CONFLIST_NAME, b"{\"a\":1}", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{\"a\":1}");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(names(dir.path()), [CONFLIST_NAME]);

        for name in ["", ".", "..", "../x", "a/b"] {
            let e = write_atomically(dir.path(), name, b"", 0o644).unwrap_err();
            assert!(matches!(e, InstallError::BadName { .. }), "{name}: {e:?}");
        }
        let e = write_atomically(&dir.path().join("nope"), "x", b"", 0o644).unwrap_err();
        assert!(matches!(e, InstallError::MissingDir { .. }), "{e:?}");
    }

    #[test]
    fn retire_renames_only_the_go_conflist() {
        let dir = tempfile::tempdir().unwrap();
        assert!(retire_go_cni_conflist(dir.path()).unwrap().is_none());

        fs::write(dir.path().join("10-aws.conflist"), b"go").unwrap();
        fs::write(dir.path().join("05-other.conflist"), b"other").unwrap();
        fs::write(dir.path().join(CONFLIST_NAME), b"ours").unwrap();
        let retired = retire_go_cni_conflist(dir.path()).unwrap().unwrap();
        assert_eq!(retired, dir.path().join(RETIRED_GO_CNI_CONFLIST));
        assert_eq!(fs::read(&retired).unwrap(), b"go");
        assert_eq!(
            names(dir.path()),
            [
                "05-other.conflist",
                "10-aws.conflist.replaced-by-vpc-cni",
                CONFLIST_NAME,
            ]
        );
        // Second run: nothing left to retire, the retired copy is untouched.
        assert!(retire_go_cni_conflist(dir.path()).unwrap().is_none());
        assert_eq!(fs::read(&retired).unwrap(), b"go");
    }

    #[test]
    fn an_unchanged_file_is_not_rewritten_and_a_changed_one_is() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        assert!(write_if_changed(dir.path(), CONFLIST_NAME, b"one", 0o644).unwrap());
        let path = dir.path().join(CONFLIST_NAME);
        let inode = fs::metadata(&path).unwrap().ino();
        assert!(!write_if_changed(dir.path(), CONFLIST_NAME, b"one", 0o644).unwrap());
        assert_eq!(
            fs::metadata(&path).unwrap().ino(),
            inode,
            "rewritten though unchanged"
        );
        // Another mode or another content: written, as a new inode. The old file is held open
        // meanwhile, so that its inode number cannot be reused for the new one.
        let held = File::open(&path).unwrap();
        assert!(write_if_changed(dir.path(), CONFLIST_NAME, b"one", 0o600).unwrap());
        assert_eq!(mode(&path), 0o600);
        assert_ne!(fs::metadata(&path).unwrap().ino(), inode);
        drop(held);
        let held = File::open(&path).unwrap();
        let inode = held.metadata().unwrap().ino();
        assert!(write_if_changed(dir.path(), CONFLIST_NAME, b"two", 0o600).unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_ne!(fs::metadata(&path).unwrap().ino(), inode);
    }
}
