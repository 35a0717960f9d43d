//! The plugin's stdin for every verb: `NetConf::parse` (with `prevResult`) and the VERSION
//! request. The checks live in `cni::fuzzing::check_conf`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni::fuzzing::check_conf(data));
