//! Several processes appending to one log under a tiny limit: the proof that matters for the
//! plugin, which runs as one short-lived process per CNI call, many at once. The test binary
//! runs itself again as the writers (`LOGFILE_TEST_WRITER` set); each writer opens its own
//! appender, so the processes share nothing but the files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use logfile::{RotatingFile, Rotation};

/// Set in a writer process: `<log path>|<writer id>|<lines>|<max size>|<max files>`.
const WRITER_ENV: &str = "LOGFILE_TEST_WRITER";
const WRITERS: u32 = 4;
const LINES: u32 = 3000;
const MAX_SIZE: u64 = 2048;

/// The `n`th line of writer `w`: its length varies with `n`, and every byte is known, so a
/// torn, merged or shortened line shows.
fn line(w: u32, n: u32) -> String {
    format!("w{w} n{n} {}|\n", "abcdefghij".repeat((n % 9) as usize))
}

/// In a writer process: append this writer's lines and exit.
fn write_lines(spec: &str) {
    let fields: Vec<&str> = spec.split('|').collect();
    let [path, w, lines, size, files] = fields[..] else {
        panic!("bad {WRITER_ENV}: {spec}");
    };
    let rotation = Rotation::new(size.parse().unwrap(), files.parse().unwrap()).unwrap();
    let log = RotatingFile::open(path, rotation).unwrap();
    let w: u32 = w.parse().unwrap();
    for n in 0..lines.parse().unwrap() {
        log.append(line(w, n).as_bytes()).unwrap();
    }
}

/// Runs `test` (its path in this binary, `module::name`) as `WRITERS` writer processes at
/// once, and waits for them.
fn run_writers(test: &str, path: &Path, max_files: u32) {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<Child> = (0..WRITERS)
        .map(|w| {
            Command::new(&exe)
                .args([test, "--exact", "--quiet", "--test-threads=1"])
                .env(
                    WRITER_ENV,
                    format!("{}|{w}|{LINES}|{MAX_SIZE}|{max_files}", path.display()),
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // A writer prints a few lines of test harness output: the pipes never fill.
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a writer failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Every line in the log and its rotated files, by writer: the line numbers in the order they
/// were written (oldest file first). Checks each line is whole and each file within the limit.
fn read_back(path: &Path) -> (BTreeMap<u32, Vec<u32>>, Vec<PathBuf>) {
    let dir = path.parent().unwrap();
    let name = path.file_name().unwrap().to_str().unwrap();
    let mut rotated: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let n = p.file_name()?.to_str()?.strip_prefix(&format!("{name}."))?;
            Some((n.parse().ok()?, p.clone()))
        })
        .collect();
    rotated.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    files.push(path.to_path_buf());
    let mut lines: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(
            text.len() as u64 <= MAX_SIZE,
            "{} holds {} bytes",
            file.display(),
            text.len()
        );
        for l in text.split_inclusive('\n') {
            let mut words = l[1..].split(' ');
            let w: u32 = words.next().unwrap().parse().unwrap();
            let n: u32 = words.next().unwrap()[1..].parse().unwrap();
            assert_eq!(l, line(w, n), "in {}", file.display());
            lines.entry(w).or_default().push(n);
        }
    }
    (lines, files)
}

#[test]
fn processes_lose_no_line_and_write_none_twice() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        return write_lines(&spec);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plugin.log");
    // Room for everything: every line must be found, exactly once.
    run_writers(
        "processes::processes_lose_no_line_and_write_none_twice",
        &path,
        100_000,
    );
    let (lines, files) = read_back(&path);
    for w in 0..WRITERS {
        let got = lines.get(&w).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            got,
            (0..LINES).collect::<Vec<_>>(),
            "writer {w}: each line once, in its order"
        );
    }
    // About 4 * 3000 * 60 bytes in 2 KiB files.
    assert!(files.len() > 100, "rotated only {} times", files.len() - 1);
}

#[test]
fn processes_keep_exactly_the_newest_files_without_a_gap() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        return write_lines(&spec);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plugin.log");
    run_writers(
        "processes::processes_keep_exactly_the_newest_files_without_a_gap",
        &path,
        3,
    );
    let (lines, files) = read_back(&path);
    assert_eq!(files.len(), 4, "the log and 3 rotated files: {files:?}");
    // What is kept is the end of what was written: for every writer, its last lines up to its
    // last one, with none missing in between.
    for (w, got) in &lines {
        let first = got[0];
        assert_eq!(
            got,
            &(first..LINES).collect::<Vec<_>>(),
            "writer {w} lost a line it wrote after {first}"
        );
    }
    let kept: usize = lines.values().map(Vec::len).sum();
    assert!(
        kept < (WRITERS * LINES) as usize,
        "older lines were removed"
    );
}
