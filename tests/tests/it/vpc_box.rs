//! `vpc-box.sh down` stops exactly what `up` started, whatever environment it runs in, never
//! signals a process that only reuses a recorded pid, and names what it could not remove.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use e2e::{VpcBox, bin_dir, require_root, vpc_box};
use testkit::netns::names_with_prefix;

/// The processes running an executable from `dir`.
fn running_from(dir: &Path) -> Vec<(u32, PathBuf)> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| {
            let pid = e.ok()?.file_name().to_str()?.parse().ok()?;
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            exe.starts_with(dir).then_some((pid, exe))
        })
        .collect()
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot.
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("a running process");
    let (_, fields) = stat.rsplit_once(") ").expect("stat fields");
    fields
        .split_whitespace()
        .nth(19)
        .and_then(|f| f.parse().ok())
        .expect("field 22")
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn down_stops_what_up_started_whatever_bin_dir_it_runs_with() {
    require_root();
    // The binaries under another directory, as a release build's would be.
    let release = tempfile::tempdir().expect("a temp dir");
    for binary in ["vpc-sim", "ipamd", "vpc-cni"] {
        let (from, to) = (bin_dir().join(binary), release.path().join(binary));
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).expect("copying a binary");
        }
    }
    let env = format!("VPC_CNI_BIN_DIR={}", release.path().display());
    let vbox = VpcBox::up_with_env(&[&env], &[]);
    let prefix = format!("{}-", vbox.name());
    let started = running_from(release.path());
    assert!(
        started.len() >= 2,
        "vpc-sim and ipamd run from {}: {started:?}",
        release.path().display()
    );
    assert!(!names_with_prefix(&prefix).is_empty());

    // Stopped from the caller's environment, whose VPC_CNI_BIN_DIR is another one.
    let out = vbox.down_with_env(&["-u", "VPC_CNI_BIN_DIR"]);
    assert!(
        out.status.success(),
        "down failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(running_from(release.path()), vec![], "processes left");
    assert_eq!(names_with_prefix(&prefix), Vec::<String>::new());
    assert!(!vbox.run_dir().exists(), "{:?}", vbox.run_dir());
}

/// A child that is stopped (and reaped) when dropped, however the test ends.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(Command::new("sleep").arg("120").spawn().expect("sleep"))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }

    /// Whether it ended by itself or by someone else's signal (waiting a little for it).
    fn ended(&mut self) -> bool {
        testkit::within(Duration::from_secs(10), || !self.running())
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A directory where a namespace's file would be: `ip netns del` cannot remove it.
struct FakeNamespace(PathBuf);

impl Drop for FakeNamespace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn down_signals_only_what_it_recorded_and_reports_what_it_cannot_remove() {
    require_root();
    // A box's run dir written by hand: no namespaces, just its records.
    let run = tempfile::tempdir().expect("a temp dir");
    let name = "records";
    let dir = run.path().join(name);
    std::fs::create_dir(&dir).expect("the run dir");
    let mut ours = Sleeper::start();
    // A process that reuses a recorded pid: the record's start time is not its own.
    let mut stranger = Sleeper::start();
    std::fs::write(
        dir.join("processes"),
        format!(
            "{} {} ipamd-node1 /nowhere/ipamd\n{} {} vpc-sim /nowhere/vpc-sim\n",
            ours.pid(),
            start_time(ours.pid()),
            stranger.pid(),
            start_time(stranger.pid()) + 1,
        ),
    )
    .expect("the records");
    let stuck = testkit::unique("vbt");
    let fake = FakeNamespace(testkit::netns::path(&stuck));
    std::fs::create_dir_all(&fake.0).expect("a directory under /run/netns");
    std::fs::write(dir.join("namespaces"), format!("{stuck}\n")).expect("the namespaces");
    let down = || {
        let env = format!("VPC_BOX_RUN_DIR={}", run.path().display());
        vpc_box(60, &[&env], &["down", "--name", name])
    };

    let out = down();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("could not remove namespace {stuck}")),
        "{stderr}"
    );
    assert!(ours.ended(), "the recorded process still runs");
    assert!(
        stranger.running(),
        "a process that only reuses a recorded pid was signalled"
    );
    assert!(dir.exists(), "the run dir is kept for another down");

    drop(fake);
    let out = down();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.exists());
    assert!(
        stranger.running(),
        "a process that only reuses a recorded pid was signalled"
    );
}
