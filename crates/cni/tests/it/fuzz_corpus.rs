//! Replays the committed fuzz corpora (`fuzz/corpus/cni_conf`, `fuzz/corpus/cni_args`) through
//! the checks the fuzz targets run, so every seed and saved crash is re-checked on stable Rust.

use testkit::fuzz::replay;

#[test]
fn cni_conf_corpus_passes_the_fuzz_checks() {
    replay("cni_conf", cni::fuzzing::check_conf);
}

#[test]
fn cni_args_corpus_passes_the_fuzz_checks() {
    replay("cni_args", cni::fuzzing::check_args);
}
