//! Checks run by the fuzz target in `fuzz/` and by the corpus replay test
//! (`tests/it/fuzz_corpus.rs`), kept here so both run exactly the same code. Not part of the API.

use std::io::Cursor;

use crate::PROTOCOL_VERSION;
use crate::frame::{
    FrameError, MAX_FRAME_BYTES, decode_reply, decode_request, encode_reply, encode_request,
    read_frame,
};
use crate::message::ErrorKind;

/// Bytes as they arrive on ipamd's socket, in either direction.
///
/// Decodes `data` whole as a request and as a reply, then reads it as a stream with
/// [`read_frame`] and decodes every frame both ways. Panics when:
/// - [`read_frame`] returns a frame with a newline, longer than [`MAX_FRAME_BYTES`], or other
///   than the bytes up to the next newline; or misjudges the end of the stream (`None` only at
///   the very end, `TooLong` only past the limit, `Truncated` with the exact count);
/// - a decoded request or reply, encoded again, is not one newline-terminated line that decodes
///   to the same value;
/// - an error is not of the documented kinds (a request error is `BadRequest` or
///   `VersionMismatch`; a reply version mismatch names a version other than ours).
pub fn check_frames(data: &[u8]) {
    check_frame(data);

    let mut stream = Cursor::new(data);
    // Every successful read consumes at least one byte, so this bounds the loop.
    for _ in 0..=data.len() {
        let start = position(&stream);
        let rest = &data[start..];
        match read_frame(&mut stream) {
            Ok(Some(frame)) => {
                let end = rest.iter().position(|&b| b == b'\n');
                assert_eq!(end, Some(frame.len()), "frame does not end at the newline");
                assert!(frame.len() <= MAX_FRAME_BYTES, "{} byte frame", frame.len());
                assert_eq!(frame.as_slice(), &rest[..frame.len()]);
                assert_eq!(position(&stream), start + frame.len() + 1);
                check_frame(&frame);
            }
            Ok(None) => {
                assert!(
                    rest.is_empty(),
                    "end of stream with {} bytes left",
                    rest.len()
                );
                return;
            }
            Err(FrameError::TooLong) => {
                let line = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
                assert!(line > MAX_FRAME_BYTES, "{line} byte frame called too long");
                return;
            }
            Err(FrameError::Truncated(n)) => {
                assert_eq!(n, rest.len(), "wrong truncated count");
                assert!(!rest.contains(&b'\n') && n <= MAX_FRAME_BYTES);
                return;
            }
            Err(e) => panic!("read_frame over memory failed: {e}"),
        }
    }
    panic!("read_frame did not reach the end of {} bytes", data.len());
}

fn position(stream: &Cursor<&[u8]>) -> usize {
    usize::try_from(stream.position()).unwrap_or(usize::MAX)
}

/// One frame (without its newline), decoded as a request and as a reply.
fn check_frame(frame: &[u8]) {
    match decode_request(frame) {
        Ok(req) => {
            let again = one_line(encode_request(&req));
            assert_eq!(
                decode_request(&again).as_ref(),
                Ok(&req),
                "request changed in a round trip: {}",
                String::from_utf8_lossy(&again)
            );
        }
        Err(e) => {
            assert!(
                matches!(e.kind, ErrorKind::BadRequest | ErrorKind::VersionMismatch),
                "request error of kind {:?}",
                e.kind
            );
            assert!(!e.message.is_empty());
        }
    }

    match decode_reply(frame) {
        Ok(outcome) => {
            let again = one_line(encode_reply(&outcome));
            match decode_reply(&again) {
                Ok(back) => assert_eq!(back, outcome, "reply changed in a round trip"),
                Err(e) => panic!(
                    "re-encoded reply {} does not decode: {e}",
                    String::from_utf8_lossy(&again)
                ),
            }
        }
        Err(FrameError::VersionMismatch { peer, ours }) => {
            assert_eq!(ours, PROTOCOL_VERSION);
            assert_ne!(peer, ours, "mismatch reported for our own version");
        }
        Err(FrameError::Malformed(why)) => assert!(!why.is_empty()),
        Err(e) => panic!("decode_reply failed with a reader error: {e}"),
    }
}

/// An encoded frame must be exactly one newline-terminated line; returns it without the newline.
fn one_line(mut encoded: Vec<u8>) -> Vec<u8> {
    assert_eq!(
        encoded.pop(),
        Some(b'\n'),
        "encoded frame does not end with a newline"
    );
    assert!(!encoded.contains(&b'\n'), "encoded frame spans lines");
    encoded
}
