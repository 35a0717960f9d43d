//! Replays the committed fuzz corpus (`fuzz/corpus/ipam_frame`) through the checks the fuzz
//! target runs, so every seed and saved crash is re-checked on stable Rust.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Runs `check` on every file of `fuzz/corpus/<target>` and fails naming each file that panics.
/// A missing or empty corpus fails too: this test must never pass without checking anything.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    files.retain(|p| p.is_file());
    files.sort();
    assert!(!files.is_empty(), "{} holds no seeds", dir.display());

    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let data = fs::read(path).unwrap();
            panic::catch_unwind(AssertUnwindSafe(|| check(&data))).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} seeds fail: {failed:#?}",
        failed.len(),
        files.len()
    );
}

#[test]
fn ipam_frame_corpus_passes_the_fuzz_checks() {
    replay("ipam_frame", ipam_proto::fuzzing::check_frames);
}
