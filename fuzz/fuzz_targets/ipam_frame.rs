//! Bytes on ipamd's socket: framing, request and reply decoding, re-encoding. The checks live
//! in `ipam_proto::fuzzing::check_frames`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ipam_proto::fuzzing::check_frames(data));
