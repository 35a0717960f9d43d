//! `CNI_ARGS` (first line) and the `CNI_*` environment (following lines). The checks live in
//! `cni::fuzzing::check_args`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni::fuzzing::check_args(data));
