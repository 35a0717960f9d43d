//! Replays the committed fuzz corpus (`fuzz/corpus/ipam_frame`) through the checks the fuzz
//! target runs, so every seed and saved crash is re-checked on stable Rust.

use testkit::fuzz::replay;

#[test]
fn ipam_frame_corpus_passes_the_fuzz_checks() {
    replay("ipam_frame", ipam_proto::fuzzing::check_frames);
}
