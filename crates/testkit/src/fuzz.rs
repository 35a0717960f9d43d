//! Replays the committed fuzz corpora through the checks the fuzz targets run, so every seed
//! and saved crash is re-checked by `cargo test` on stable Rust.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;

/// Runs `check` on every file of `fuzz/corpus/<target>` and fails naming each file that panics.
/// A missing or empty corpus fails too: a replay must never pass without checking anything.
pub fn replay(target: &str, check: fn(&[u8])) {
    let dir = crate::repo().join("fuzz/corpus").join(target);
    let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no seeds", dir.display());

    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let data = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
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
