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

use serde_json::Value;
use thiserror::Error;

/// The conflist's file name. It sorts after nothing we keep, and the Go CNI's
/// `10-aws.conflist` is retired by [`retire_go_cni_conflist`] because it would sort first.
pub const CONFLIST_NAME: &str = "10-vpc-cni.conflist";

/// The Go CNI's conflist.
pub const GO_CNI_CONFLIST: &str = "10-aws.conflist";

/// What [`GO_CNI_CONFLIST`] is renamed to: libcni loads only `*.conf`, `*.conflist` and
/// `*.json`, so the runtime ignores it while an operator can still read or restore it.
pub const RETIRED_GO_CNI_CONFLIST: &str = "10-aws.conflist.replaced-by-vpc-cni";

/// The plugin `type` whose keys [`render_conflist`] sets.
pub const PLUGIN_TYPE: &str = "vpc-cni";

/// Default `AWS_VPC_K8S_PLUGIN_LOG_FILE`.
pub const DEFAULT_PLUGIN_LOG_FILE: &str = "/var/log/aws-routed-eni/plugin.log";

/// Default `IPAMD_SOCKET` (the plugin's default too).
pub const DEFAULT_IPAMD_SOCKET: &str = "/run/vpc-cni/ipamd.sock";

const MIN_MTU: u32 = 576;
const MAX_MTU: u32 = 9001;
const MAX_VETH_PREFIX_LEN: usize = 4;
const RESERVED_VETH_PREFIXES: [&str; 3] = ["eth", "lo", "vlan"];

/// An installation step that failed; each names the path or variable involved.
#[derive(Debug, Error)]
pub enum InstallError {
    /// A directory that must already exist does not (the hostPath mount is missing).
    #[error("directory {} does not exist (is the host path mounted?)", path.display())]
    MissingDir {
        /// The directory.
        path: PathBuf,
    },
    /// A path that must be a directory is something else.
    #[error("{} is not a directory", path.display())]
    NotADir {
        /// The path.
        path: PathBuf,
    },
    /// A file system operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done ("copying to", "renaming into place", ...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// A file name that would escape its directory or is empty.
    #[error("{name:?} is not a plain file name (writing into {})", dir.display())]
    BadName {
        /// The directory.
        dir: PathBuf,
        /// The name.
        name: String,
    },
    /// An environment variable with a value the conflist cannot carry.
    #[error("{var}={value:?}: {problem}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        problem: String,
    },
    /// The conflist template is unusable.
    #[error("conflist template: {problem}")]
    Template {
        /// What is wrong.
        problem: String,
    },
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> InstallError + use<> {
    let path = path.to_path_buf();
    move |source| InstallError::Io { op, path, source }
}

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

/// The values [`render_conflist`] puts into the `vpc-cni` plugin's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConflistSettings {
    /// `vethPrefix`, from `AWS_VPC_K8S_CNI_VETHPREFIX`.
    pub veth_prefix: String,
    /// `mtu` (written as a string, as the Go CNI does), from `POD_MTU` else `AWS_VPC_ENI_MTU`.
    pub mtu: u32,
    /// `pluginLogFile`, from `AWS_VPC_K8S_PLUGIN_LOG_FILE`; empty means stderr.
    pub plugin_log_file: String,
    /// `pluginLogLevel`, from `AWS_VPC_K8S_PLUGIN_LOG_LEVEL`.
    pub plugin_log_level: String,
    /// `ipamdSocket`, from `IPAMD_SOCKET` (the same variable ipamd listens on).
    pub ipamd_socket: String,
}

fn env_err(var: &'static str, value: &str, problem: impl Into<String>) -> InstallError {
    InstallError::Env {
        var,
        value: value.to_string(),
        problem: problem.into(),
    }
}

impl ConflistSettings {
    /// Reads the settings through `get` (the process environment in production). As in ipamd's
    /// configuration, values are trimmed and an empty value counts as unset, except for
    /// `AWS_VPC_K8S_PLUGIN_LOG_FILE`, where empty means stderr as in the Go CNI.
    ///
    /// Checks: the veth prefix is 1 to 4 bytes, not `eth`, `lo` or `vlan`, without `/`, `:` or
    /// whitespace (what the plugin accepts; the Go CNI checks length and reserved names); the
    /// MTU is 576..=9001 (the plugin refuses others); the log file is not `stdout` (stdout
    /// carries the plugin's result) and is absolute (the runtime's working directory is
    /// unknown); `stderr` is written as empty, which is how the plugin spells stderr; the level
    /// is one the plugin knows (`FATAL` is written as `Error`, the plugin's highest); the
    /// socket is absolute.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, InstallError> {
        let raw = |var: &str| get(var).map(|v| v.trim().to_string());
        let set = |var: &str| raw(var).filter(|v| !v.is_empty());

        const VETH: &str = "AWS_VPC_K8S_CNI_VETHPREFIX";
        let veth_prefix = set(VETH).unwrap_or_else(|| "eni".to_string());
        if veth_prefix.len() > MAX_VETH_PREFIX_LEN {
            return Err(env_err(
                VETH,
                &veth_prefix,
                format!("must be at most {MAX_VETH_PREFIX_LEN} characters"),
            ));
        }
        if RESERVED_VETH_PREFIXES.contains(&veth_prefix.as_str()) {
            return Err(env_err(
                VETH,
                &veth_prefix,
                "eth, lo and vlan are reserved for the node's own interfaces",
            ));
        }
        if veth_prefix
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace())
        {
            return Err(env_err(
                VETH,
                &veth_prefix,
                "must not contain '/', ':' or whitespace (it starts interface names)",
            ));
        }

        let (mtu_var, mtu_value) = match set("POD_MTU") {
            Some(v) => ("POD_MTU", Some(v)),
            None => ("AWS_VPC_ENI_MTU", set("AWS_VPC_ENI_MTU")),
        };
        let mtu = match mtu_value {
            None => MAX_MTU,
            Some(v) => match v.parse::<u32>() {
                Ok(n) if (MIN_MTU..=MAX_MTU).contains(&n) => n,
                _ => {
                    return Err(env_err(
                        mtu_var,
                        &v,
                        format!("must be a whole number from {MIN_MTU} to {MAX_MTU}"),
                    ));
                }
            },
        };

        const LOG_FILE: &str = "AWS_VPC_K8S_PLUGIN_LOG_FILE";
        let plugin_log_file = match raw(LOG_FILE) {
            None => DEFAULT_PLUGIN_LOG_FILE.to_string(),
            Some(v) if v.is_empty() || v == "stderr" => String::new(),
            Some(v) if v == "stdout" => {
                return Err(env_err(
                    LOG_FILE,
                    &v,
                    "the plugin's stdout carries its result to the runtime; use a file or stderr",
                ));
            }
            Some(v) if !Path::new(&v).is_absolute() => {
                return Err(env_err(
                    LOG_FILE,
                    &v,
                    "must be an absolute path, stderr or empty",
                ));
            }
            Some(v) => v,
        };

        const LOG_LEVEL: &str = "AWS_VPC_K8S_PLUGIN_LOG_LEVEL";
        let plugin_log_level = match set(LOG_LEVEL) {
            None => "DEBUG".to_string(),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "trace" | "debug" | "info" | "warn" | "warning" | "error" => v,
                "fatal" => "Error".to_string(),
                _ => {
                    return Err(env_err(
                        LOG_LEVEL,
                        &v,
                        "expected TRACE, DEBUG, INFO, WARN, ERROR or FATAL",
                    ));
                }
            },
        };

        const SOCKET: &str = "IPAMD_SOCKET";
        let ipamd_socket = set(SOCKET).unwrap_or_else(|| DEFAULT_IPAMD_SOCKET.to_string());
        if !Path::new(&ipamd_socket).is_absolute() {
            return Err(env_err(SOCKET, &ipamd_socket, "must be an absolute path"));
        }

        Ok(ConflistSettings {
            veth_prefix,
            mtu,
            plugin_log_file,
            plugin_log_level,
            ipamd_socket,
        })
    }
}

/// Renders the shipped conflist: sets `mtu` (as a string), `vethPrefix`, `pluginLogFile`,
/// `pluginLogLevel` and `ipamdSocket` on the one plugin whose `type` is `vpc-cni`, leaves
/// everything else (portmap, ...) as it is, and pretty-prints the result with a final newline.
/// Errors: the template is not JSON, has no `plugins` array, or has no or several `vpc-cni`
/// entries.
pub fn render_conflist(
    template: &str,
    settings: &ConflistSettings,
) -> Result<String, InstallError> {
    let bad = |problem: String| InstallError::Template { problem };
    let mut doc: Value =
        serde_json::from_str(template).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let plugins = doc
        .get_mut("plugins")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| bad("has no \"plugins\" array".to_string()))?;
    let mut ours = plugins
        .iter_mut()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some(PLUGIN_TYPE));
    let plugin = ours
        .next()
        .ok_or_else(|| bad(format!("no plugin has \"type\": {PLUGIN_TYPE:?}")))?;
    let Value::Object(entry) = plugin else {
        return Err(bad("the vpc-cni plugin entry is not an object".to_string()));
    };
    entry.insert("mtu".into(), Value::from(settings.mtu.to_string()));
    entry.insert(
        "vethPrefix".into(),
        Value::from(settings.veth_prefix.clone()),
    );
    entry.insert(
        "pluginLogFile".into(),
        Value::from(settings.plugin_log_file.clone()),
    );
    entry.insert(
        "pluginLogLevel".into(),
        Value::from(settings.plugin_log_level.clone()),
    );
    entry.insert(
        "ipamdSocket".into(),
        Value::from(settings.ipamd_socket.clone()),
    );
    if ours.next().is_some() {
        return Err(bad(format!(
            "more than one plugin has \"type\": {PLUGIN_TYPE:?}"
        )));
    }
    let mut out =
        serde_json::to_string_pretty(&doc).map_err(|e| bad(format!("cannot be printed: {e}")))?;
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const TEMPLATE: &str = r#"{
      "cniVersion": "1.1.0",
      "name": "aws-cni",
      "plugins": [
        {"type": "vpc-cni", "mtu": "9001", "vethPrefix": "eni",
         "pluginLogFile": "/var/log/aws-routed-eni/plugin.log", "pluginLogLevel": "DEBUG",
         "ipamdSocket": "/run/vpc-cni/ipamd.sock",
         "capabilities": {"io.kubernetes.cri.pod-annotations": true}},
        {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
      ]
    }"#;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

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
    fn defaults_match_the_go_cni() {
        let s = ConflistSettings::from_env(env(&[])).unwrap();
        assert_eq!(
            s,
            ConflistSettings {
                veth_prefix: "eni".into(),
                mtu: 9001,
                plugin_log_file: "/var/log/aws-routed-eni/plugin.log".into(),
                plugin_log_level: "DEBUG".into(),
                ipamd_socket: "/run/vpc-cni/ipamd.sock".into(),
            }
        );
    }

    #[test]
    fn env_values_are_taken() {
        let s = ConflistSettings::from_env(env(&[
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "pod"),
            ("AWS_VPC_ENI_MTU", "1500"),
            ("POD_MTU", " 1400 "),
            ("AWS_VPC_K8S_PLUGIN_LOG_FILE", "/tmp/p.log"),
            ("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "Info"),
            ("IPAMD_SOCKET", "/run/x.sock"),
        ]))
        .unwrap();
        assert_eq!(s.veth_prefix, "pod");
        assert_eq!(s.mtu, 1400);
        assert_eq!(s.plugin_log_file, "/tmp/p.log");
        assert_eq!(s.plugin_log_level, "Info");
        assert_eq!(s.ipamd_socket, "/run/x.sock");

        let s = ConflistSettings::from_env(env(&[("AWS_VPC_ENI_MTU", "1500"), ("POD_MTU", "")]))
            .unwrap();
        assert_eq!(s.mtu, 1500, "an empty POD_MTU falls back to the ENI MTU");

        for stderr in ["", "stderr"] {
            let s = ConflistSettings::from_env(env(&[("AWS_VPC_K8S_PLUGIN_LOG_FILE", stderr)]))
                .unwrap();
            assert_eq!(s.plugin_log_file, "", "{stderr:?}");
        }
        let s =
            ConflistSettings::from_env(env(&[("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "FATAL")])).unwrap();
        assert_eq!(s.plugin_log_level, "Error");
    }

    #[test]
    fn bad_env_values_are_rejected_naming_the_variable() {
        for (var, value) in [
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "abcde"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "eth"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "lo"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "vlan"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "a/b"),
            ("POD_MTU", "575"),
            ("POD_MTU", "9002"),
            ("POD_MTU", "jumbo"),
            ("AWS_VPC_ENI_MTU", "100"),
            ("AWS_VPC_K8S_PLUGIN_LOG_FILE", "stdout"),
            ("AWS_VPC_K8S_PLUGIN_LOG_FILE", "plugin.log"),
            ("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "loud"),
            ("IPAMD_SOCKET", "ipamd.sock"),
        ] {
            let e = ConflistSettings::from_env(env(&[(var, value)])).unwrap_err();
            let InstallError::Env { var: named, .. } = &e else {
                panic!("{var}={value}: {e:?}");
            };
            assert_eq!(*named, var, "{value}");
            let text = e.to_string();
            assert!(text.starts_with(&format!("{var}={value:?}: ")), "{text}");
        }
    }

    #[test]
    fn rendering_sets_every_key_and_keeps_the_rest() {
        let settings = ConflistSettings {
            veth_prefix: "pod".into(),
            mtu: 1500,
            plugin_log_file: String::new(),
            plugin_log_level: "Info".into(),
            ipamd_socket: "/run/x.sock".into(),
        };
        let out = render_conflist(TEMPLATE, &settings).unwrap();
        assert!(out.ends_with("}\n"));
        assert!(out.lines().count() > 5, "pretty-printed: {out}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc["cniVersion"], "1.1.0");
        assert_eq!(doc["name"], "aws-cni");
        let ours = &doc["plugins"][0];
        assert_eq!(ours["type"], "vpc-cni");
        assert_eq!(ours["mtu"], Value::from("1500"));
        assert_eq!(ours["vethPrefix"], "pod");
        assert_eq!(ours["pluginLogFile"], "");
        assert_eq!(ours["pluginLogLevel"], "Info");
        assert_eq!(ours["ipamdSocket"], "/run/x.sock");
        assert_eq!(
            ours["capabilities"]["io.kubernetes.cri.pod-annotations"],
            true
        );
        let template: Value = serde_json::from_str(TEMPLATE).unwrap();
        assert_eq!(doc["plugins"][1], template["plugins"][1]);
        assert_eq!(doc["plugins"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn the_shipped_conflist_renders() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/10-vpc-cni.conflist");
        let template = fs::read_to_string(&path).unwrap();
        let s = ConflistSettings::from_env(env(&[("POD_MTU", "1500")])).unwrap();
        let doc: Value = serde_json::from_str(&render_conflist(&template, &s).unwrap()).unwrap();
        assert_eq!(doc["name"], "aws-cni");
        let ours = doc["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == PLUGIN_TYPE)
            .unwrap();
        assert_eq!(ours["mtu"], "1500");
    }

    #[test]
    fn rendering_adds_keys_the_template_lacks() {
        let template = r#"{"cniVersion":"1.1.0","name":"aws-cni","plugins":[{"type":"vpc-cni"}]}"#;
        let s = ConflistSettings::from_env(env(&[])).unwrap();
        let doc: Value = serde_json::from_str(&render_conflist(template, &s).unwrap()).unwrap();
        assert_eq!(doc["plugins"][0]["mtu"], "9001");
        assert_eq!(doc["plugins"][0]["ipamdSocket"], "/run/vpc-cni/ipamd.sock");
    }

    #[test]
    fn unusable_templates_are_rejected() {
        let s = ConflistSettings::from_env(env(&[])).unwrap();
        for (template, needle) in [
            (
                r#"{"plugins":[{"type":"portmap"}]}"#,
                "no plugin has \"type\": \"vpc-cni\"",
            ),
            (r#"{"plugins":[]}"#, "no plugin has"),
            (r#"{"name":"aws-cni"}"#, "no \"plugins\" array"),
            (
                r#"{"plugins":[{"type":"vpc-cni"},{"type":"vpc-cni"}]}"#,
                "more than one plugin",
            ),
            (r#"{"plugins":[{"type":"vpc-cni""#, "not valid JSON"),
        ] {
            let e = render_conflist(template, &s).unwrap_err();
            assert!(matches!(e, InstallError::Template { .. }), "{template}");
            assert!(e.to_string().contains(needle), "{template}: {e}");
        }
    }
}
