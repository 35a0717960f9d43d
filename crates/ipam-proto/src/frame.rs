use std::io::{self, BufRead, Read};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::PROTOCOL_VERSION;
use crate::message::{DaemonError, ErrorKind, Reply, Request};

/// Longest frame either side accepts, newline excluded. Requests are a few hundred bytes; the
/// limit bounds what a garbage or hostile peer can make the daemon buffer.
pub const MAX_FRAME_BYTES: usize = 64 * 1024;

/// A frame could not be read or understood.
#[derive(Debug, Error)]
pub enum FrameError {
    /// Reading failed.
    #[error("reading frame: {0}")]
    Io(#[from] io::Error),
    /// The peer sent more than [`MAX_FRAME_BYTES`] without a newline.
    #[error("frame longer than {MAX_FRAME_BYTES} bytes")]
    TooLong,
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed after {0} bytes of an unterminated frame")]
    Truncated(usize),
    /// Not a frame of this protocol.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: peer speaks {peer}, this side {ours}")]
    VersionMismatch {
        /// The peer's version.
        peer: u32,
        /// Ours.
        ours: u32,
    },
}

#[derive(Serialize)]
struct RequestOut<'a> {
    v: u32,
    req: &'a Request,
}

#[derive(Deserialize)]
struct RequestIn {
    v: Option<u32>,
    req: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct ReplyOut<'a> {
    v: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    ok: Option<&'a Reply>,
    #[serde(skip_serializing_if = "Option::is_none")]
    err: Option<&'a DaemonError>,
}

#[derive(Deserialize)]
struct ReplyIn {
    v: Option<u32>,
    ok: Option<serde_json::Value>,
    err: Option<DaemonError>,
}

fn line(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.push(b'\n');
    bytes
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Our message types hold only strings, numbers and addresses: serialization cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// The newline-terminated frame of a request.
pub fn encode_request(req: &Request) -> Vec<u8> {
    line(to_json(&RequestOut {
        v: PROTOCOL_VERSION,
        req,
    }))
}

/// Decodes a request frame (without its newline). The error is the reply to send back: a frame
/// of another protocol version gets [`ErrorKind::VersionMismatch`] naming both versions, anything
/// undecodable gets [`ErrorKind::BadRequest`] saying what is wrong.
pub fn decode_request(frame: &[u8]) -> Result<Request, DaemonError> {
    let bad = |what: String| DaemonError::new(ErrorKind::BadRequest, what);
    let envelope: RequestIn = serde_json::from_slice(frame).map_err(|e| {
        bad(format!(
            "request is not a JSON object of this protocol: {e}"
        ))
    })?;
    match envelope.v {
        Some(PROTOCOL_VERSION) => {}
        Some(v) => {
            return Err(DaemonError::new(
                ErrorKind::VersionMismatch,
                format!(
                    "plugin speaks protocol version {v}, ipamd speaks {PROTOCOL_VERSION}: \
                     install the vpc-cni plugin that ships with this ipamd"
                ),
            ));
        }
        None => return Err(bad("request has no protocol version \"v\"".into())),
    }
    let req = envelope
        .req
        .ok_or_else(|| bad("request has no \"req\" object".into()))?;
    serde_json::from_value(req).map_err(|e| bad(format!("invalid request: {e}")))
}

/// The newline-terminated frame of a reply.
pub fn encode_reply(outcome: &Result<Reply, DaemonError>) -> Vec<u8> {
    let (ok, err) = match outcome {
        Ok(reply) => (Some(reply), None),
        Err(e) => (None, Some(e)),
    };
    line(to_json(&ReplyOut {
        v: PROTOCOL_VERSION,
        ok,
        err,
    }))
}

/// Decodes a reply frame (without its newline).
pub fn decode_reply(frame: &[u8]) -> Result<Result<Reply, DaemonError>, FrameError> {
    let envelope: ReplyIn =
        serde_json::from_slice(frame).map_err(|e| FrameError::Malformed(e.to_string()))?;
    // A daemon of another version still answers in the frozen envelope; its error text (which
    // names both versions) is more useful than ours, so surface it when there is one.
    match (envelope.v, envelope.err, envelope.ok) {
        (Some(v), Some(err), _)
            if v != PROTOCOL_VERSION && err.kind != ErrorKind::VersionMismatch =>
        {
            Err(FrameError::VersionMismatch {
                peer: v,
                ours: PROTOCOL_VERSION,
            })
        }
        (_, Some(err), _) => Ok(Err(err)),
        (Some(PROTOCOL_VERSION), None, Some(ok)) => serde_json::from_value(ok)
            .map(Ok)
            .map_err(|e| FrameError::Malformed(format!("invalid reply: {e}"))),
        (Some(v), None, Some(_)) => Err(FrameError::VersionMismatch {
            peer: v,
            ours: PROTOCOL_VERSION,
        }),
        _ => Err(FrameError::Malformed(
            "reply has neither \"ok\" nor \"err\" with a version".into(),
        )),
    }
}

/// Reads one newline-terminated frame, without the newline. `Ok(None)` is a clean end of stream
/// before any byte of a new frame.
pub fn read_frame<R: BufRead>(reader: &mut R) -> Result<Option<Vec<u8>>, FrameError> {
    let mut buf = Vec::with_capacity(512);
    reader
        .by_ref()
        .take(READ_LIMIT)
        .read_until(b'\n', &mut buf)?;
    end_frame(buf)
}

/// How many bytes a reader may take for one frame: one more than the limit, so an over-long
/// frame is seen as such rather than as a truncated one.
pub const READ_LIMIT: u64 = MAX_FRAME_BYTES as u64 + 1;

/// Judges what a `read_until(b'\n')` bounded by [`READ_LIMIT`] produced: the frame without its
/// newline, `None` for a clean end of stream, or why it is not a frame. Shared by the blocking
/// reader above and ipamd's async one.
pub fn end_frame(mut buf: Vec<u8>) -> Result<Option<Vec<u8>>, FrameError> {
    match buf.last() {
        None => Ok(None),
        Some(b'\n') => {
            buf.pop();
            Ok(Some(buf))
        }
        Some(_) if buf.len() > MAX_FRAME_BYTES => Err(FrameError::TooLong),
        Some(_) => Err(FrameError::Truncated(buf.len())),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::message::*;

    fn key() -> AttachmentKey {
        AttachmentKey {
            network: "aws-cni".into(),
            container_id: "abc".into(),
            ifname: "eth0".into(),
        }
    }

    fn allocation() -> Allocation {
        Allocation {
            key: key(),
            pod: PodMeta {
                namespace: "default".into(),
                name: "web".into(),
                ..Default::default()
            },
            ip: Some("10.0.0.9".parse().unwrap()),
            ipv6: None,
            egress_ipv4: None,
            eni_id: "eni-1".into(),
            device_number: 0,
            route_table: 254,
        }
    }

    fn ipv6_only() -> Allocation {
        Allocation {
            ip: None,
            ipv6: Some("2001:db8::5".parse().unwrap()),
            ..allocation()
        }
    }

    fn dual() -> Allocation {
        Allocation {
            ipv6: Some("2001:db8::5".parse().unwrap()),
            device_number: 1,
            route_table: 2,
            ..allocation()
        }
    }

    fn strip(mut frame: Vec<u8>) -> Vec<u8> {
        assert_eq!(frame.pop(), Some(b'\n'));
        assert!(!frame.contains(&b'\n'), "frames are one line");
        frame
    }

    #[test]
    fn every_request_round_trips() {
        let requests = [
            Request::Add(AddRequest {
                key: key(),
                pod: PodMeta::default(),
                netns: "/run/netns/x".into(),
            }),
            Request::Del(DelRequest {
                key: key(),
                pod: PodMeta::default(),
                reason: DelReason::SetupFailed,
            }),
            Request::Check(CheckRequest { key: key() }),
            Request::Status,
            Request::Gc(GcRequest {
                network: "aws-cni".into(),
                valid: vec![ValidAttachment {
                    container_id: "abc".into(),
                    ifname: "eth0".into(),
                }],
            }),
        ];
        for req in requests {
            let frame = strip(encode_request(&req));
            assert_eq!(decode_request(&frame).unwrap(), req);
        }
    }

    #[test]
    fn every_reply_round_trips() {
        let replies = [
            Ok(Reply::Add(AddReply {
                allocation: allocation(),
                existing: true,
            })),
            Ok(Reply::Del(DelReply { released: None })),
            Ok(Reply::Check(CheckReply {
                allocation: allocation(),
            })),
            Ok(Reply::Status(StatusReply {
                ready: false,
                reason: Some("starting".into()),
                pool: PoolCounts::default(),
            })),
            Ok(Reply::Gc(GcReply {
                released: vec![allocation(), ipv6_only(), dual()],
            })),
            Err(DaemonError::new(
                ErrorKind::NoAddresses,
                "subnet subnet-1 exhausted",
            )),
            Err(DaemonError::no_addresses(
                NoAddressCause::SubnetExhausted,
                "subnet subnet-1 exhausted",
            )),
        ];
        for reply in replies {
            let frame = strip(encode_reply(&reply));
            assert_eq!(decode_reply(&frame).unwrap(), reply);
        }
    }

    /// A cause is left out when there is none, an older daemon's reply (without one) decodes,
    /// and a cause this build does not know decodes as `Unknown`.
    #[test]
    fn no_address_causes_are_optional_and_open() {
        let plain = serde_json::to_value(DaemonError::new(ErrorKind::Internal, "x")).unwrap();
        assert!(plain.get("cause").is_none(), "{plain}");
        let old: DaemonError =
            serde_json::from_str(r#"{"kind":"no_addresses","message":"full"}"#).unwrap();
        assert_eq!(old.cause, None);
        let newer: DaemonError = serde_json::from_str(
            r#"{"kind":"no_addresses","message":"full","cause":"SomethingNew"}"#,
        )
        .unwrap();
        assert_eq!(newer.cause, Some(NoAddressCause::Unknown));
        let iam = serde_json::to_value(DaemonError::no_addresses(
            NoAddressCause::MissingIamPermissions,
            "denied",
        ))
        .unwrap();
        assert_eq!(iam["cause"], NoAddressCause::MissingIamPermissions.as_str());
    }

    /// The wire shape of each family mix: an absent family is left out, not `null`, and an
    /// allocation without `ip` (an IPv6-only pod) decodes.
    #[test]
    fn allocations_carry_only_the_families_they_have() {
        let json = |a: &Allocation| serde_json::to_value(a).unwrap();
        let v4 = json(&allocation());
        assert_eq!(v4["ip"], "10.0.0.9");
        assert!(v4.get("ipv6").is_none(), "{v4}");
        let v6 = json(&ipv6_only());
        assert_eq!(v6["ipv6"], "2001:db8::5");
        assert!(v6.get("ip").is_none(), "{v6}");
        let both = json(&dual());
        assert_eq!(
            (&both["ip"], &both["ipv6"]),
            (&"10.0.0.9".into(), &"2001:db8::5".into())
        );
        for a in [allocation(), ipv6_only(), dual()] {
            assert_eq!(serde_json::from_value::<Allocation>(json(&a)).unwrap(), a);
        }

        assert_eq!(allocation().addresses().to_string(), "10.0.0.9");
        assert_eq!(ipv6_only().addresses().to_string(), "2001:db8::5");
        assert_eq!(dual().addresses().to_string(), "10.0.0.9 2001:db8::5");
        let none = Allocation {
            ip: None,
            ..allocation()
        };
        assert!(none.addresses().is_empty() && !dual().addresses().is_empty());
        assert_eq!(none.addresses().to_string(), "no address");
    }

    #[test]
    fn a_request_of_another_version_gets_a_mismatch_naming_both() {
        let err = decode_request(br#"{"v":1,"req":{"op":"teleport"}}"#).unwrap_err();
        assert_eq!(err.kind, ErrorKind::VersionMismatch);
        assert!(
            err.message.contains("version 1") && err.message.contains("speaks 2"),
            "{err}"
        );
    }

    #[test]
    fn garbage_requests_are_bad_requests_that_say_why() {
        for (frame, needle) in [
            (&b"\x00\xff garbage"[..], "not a JSON object"),
            // An array is read as the envelope's fields in order: v = 2, req = 3.
            (b"[2,3]", "invalid request"),
            (br#"{"req":{"op":"status"}}"#, "no protocol version"),
            (br#"{"v":2}"#, "no \"req\""),
            (br#"{"v":2,"req":{"op":"explode"}}"#, "invalid request"),
            (br#"{"v":2,"req":{"op":"add","key":{}}}"#, "invalid request"),
        ] {
            let err = decode_request(frame).unwrap_err();
            assert_eq!(err.kind, ErrorKind::BadRequest, "{frame:?}");
            assert!(err.message.contains(needle), "{err} lacks {needle}");
        }
    }

    #[test]
    fn a_reply_of_another_version_is_a_mismatch_not_a_parse_error() {
        let err = decode_reply(br#"{"v":9,"ok":{"op":"add","new":"shape"}}"#).unwrap_err();
        assert!(
            matches!(err, FrameError::VersionMismatch { peer: 9, ours: 2 }),
            "{err}"
        );
        // A newer daemon that rejected us says so in its own words: keep them.
        let reply = decode_reply(
            br#"{"v":9,"err":{"kind":"version_mismatch","message":"plugin speaks 2, ipamd 9"}}"#,
        )
        .unwrap();
        assert_eq!(reply.unwrap_err().kind, ErrorKind::VersionMismatch);
    }

    #[test]
    fn unknown_error_kinds_from_a_newer_daemon_still_decode() {
        let reply = decode_reply(br#"{"v":2,"err":{"kind":"quota","message":"m"}}"#).unwrap();
        assert_eq!(reply.unwrap_err().kind, ErrorKind::Unknown);
    }

    #[test]
    fn frames_are_split_on_newlines_and_bounded() {
        let mut input = Cursor::new(b"one\ntwo\n".to_vec());
        assert_eq!(read_frame(&mut input).unwrap().unwrap(), b"one");
        assert_eq!(read_frame(&mut input).unwrap().unwrap(), b"two");
        assert!(read_frame(&mut input).unwrap().is_none());

        let mut partial = Cursor::new(b"half a fr".to_vec());
        assert!(matches!(
            read_frame(&mut partial),
            Err(FrameError::Truncated(9))
        ));

        let mut huge = Cursor::new(vec![b'x'; MAX_FRAME_BYTES + 10]);
        assert!(matches!(read_frame(&mut huge), Err(FrameError::TooLong)));

        let mut exact = vec![b'x'; MAX_FRAME_BYTES];
        exact.push(b'\n');
        assert_eq!(
            read_frame(&mut Cursor::new(exact)).unwrap().unwrap().len(),
            MAX_FRAME_BYTES
        );
    }
}
