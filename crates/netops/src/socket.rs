//! A synchronous rtnetlink socket bound to one network namespace: request -> ack, and dumps.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use netlink_packet_core::{
    NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP_INTR, NetlinkBuffer, NetlinkMessage, NetlinkPayload,
    NlasIterator,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, recv};

use crate::error::{NetlinkError, Result};
use crate::messages::Request;
use crate::netns;

/// Netlink header length; a reply shorter than this cannot be a message.
const NLMSG_HDRLEN: usize = 16;
/// `NLMSGERR_ATTR_MSG`: the human-readable extended-ack text.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// A dump the kernel marks inconsistent (the table changed meanwhile) is retried this often.
const DUMP_ATTEMPTS: usize = 3;
/// `recv` interrupted by a signal is retried this often before giving up.
const EINTR_RETRIES: usize = 100;

/// A synchronous rtnetlink socket living in one network namespace.
///
/// All operations go to the namespace the socket was created in, whatever namespace the
/// calling thread is in later. Not `Sync`: use one per thread.
pub struct Netlink {
    socket: Socket,
    netns: OwnedFd,
    seq: Cell<u32>,
    buf: RefCell<Vec<u8>>,
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Netlink")
            .field("fd", &self.socket.as_raw_fd())
            .field("netns_fd", &self.netns.as_raw_fd())
            .finish()
    }
}

impl Netlink {
    /// A socket in the calling thread's current network namespace.
    pub fn current() -> Result<Self> {
        let netns = netns::open(Path::new(netns::THREAD_NETNS))?;
        Ok(Self::from_parts(open_socket()?, netns))
    }

    /// A socket in the network namespace at `path` (e.g. `/var/run/netns/x` or
    /// `/proc/<pid>/ns/net`).
    ///
    /// The calling thread enters the namespace only long enough to create the socket and is
    /// always returned to its original namespace, also on error. Only the calling thread is
    /// affected; other threads never see the switch. A missing path is
    /// [`NetlinkError::NetnsNotFound`], a path that is not a namespace [`NetlinkError::NotANetns`].
    pub fn in_netns(path: &Path) -> Result<Self> {
        let target = netns::open(path)?;
        let socket = netns::with_netns(path, &target, open_socket)?;
        Ok(Self::from_parts(socket, target))
    }

    fn from_parts(socket: Socket, netns: OwnedFd) -> Self {
        Self {
            socket,
            netns,
            seq: Cell::new(0),
            buf: RefCell::new(Vec::with_capacity(16 * 1024)),
        }
    }

    /// A file descriptor of this socket's network namespace, e.g. to create a veth peer in it.
    pub fn netns_fd(&self) -> BorrowedFd<'_> {
        self.netns.as_fd()
    }

    /// Sends a request that expects an acknowledgement and waits for it.
    pub fn execute(&self, request: Request) -> Result<()> {
        let Request { message, op } = request;
        let seq = self.send(message, &op)?;
        loop {
            let messages = self.recv_datagram(&op)?;
            for msg in messages {
                if msg.header.sequence_number != seq {
                    continue;
                }
                match msg.payload {
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(()),
                        Some(code) => {
                            return Err(NetlinkError::Kernel {
                                errno: code.get().abs(),
                                ext_ack: ext_ack_text(msg.header.flags, &e.header),
                                op,
                            });
                        }
                    },
                    NetlinkPayload::Done(_) => return Ok(()),
                    _ => {}
                }
            }
        }
    }

    /// Sends a dump request and collects every message of the answer.
    pub fn dump(&self, request: Request) -> Result<Vec<RouteNetlinkMessage>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.dump_once(&request)? {
                DumpOutcome::Complete(messages) => return Ok(messages),
                DumpOutcome::Interrupted if attempt < DUMP_ATTEMPTS => continue,
                DumpOutcome::Interrupted => {
                    return Err(NetlinkError::Kernel {
                        op: request.op,
                        errno: Errno::EINTR as i32,
                        ext_ack: Some(format!(
                            "dump interrupted by concurrent changes {DUMP_ATTEMPTS} times"
                        )),
                    });
                }
            }
        }
    }

    fn dump_once(&self, request: &Request) -> Result<DumpOutcome> {
        let op = &request.op;
        let seq = self.send(request.message.clone(), op)?;
        let mut out = Vec::new();
        let mut interrupted = false;
        loop {
            for msg in self.recv_datagram(op)? {
                if msg.header.sequence_number != seq {
                    continue;
                }
                if msg.header.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match msg.payload {
                    NetlinkPayload::InnerMessage(m) => out.push(m),
                    NetlinkPayload::Done(done) => {
                        if done.code != 0 {
                            return Err(NetlinkError::Kernel {
                                op: op.clone(),
                                errno: done.code.abs(),
                                ext_ack: None,
                            });
                        }
                        return Ok(if interrupted {
                            DumpOutcome::Interrupted
                        } else {
                            DumpOutcome::Complete(out)
                        });
                    }
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(DumpOutcome::Complete(out)),
                        Some(code) => {
                            return Err(NetlinkError::Kernel {
                                op: op.clone(),
                                errno: code.get().abs(),
                                ext_ack: ext_ack_text(msg.header.flags, &e.header),
                            });
                        }
                    },
                    _ => {}
                }
            }
        }
    }

    fn send(&self, mut message: NetlinkMessage<RouteNetlinkMessage>, op: &str) -> Result<u32> {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        message.header.sequence_number = seq;
        message.finalize();
        let mut bytes = vec![0u8; message.buffer_len()];
        message.serialize(&mut bytes);
        let kernel = SocketAddr::new(0, 0);
        self.socket
            .send_to(&bytes, &kernel, 0)
            .map_err(|source| NetlinkError::Socket {
                op: op.to_string(),
                source,
            })?;
        Ok(seq)
    }

    /// Reads one datagram (however large) and decodes every netlink message in it.
    fn recv_datagram(&self, op: &str) -> Result<Vec<NetlinkMessage<RouteNetlinkMessage>>> {
        let fd = self.socket.as_raw_fd();
        let socket_err = |errno: Errno| NetlinkError::Socket {
            op: op.to_string(),
            source: match errno {
                Errno::EAGAIN => std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no answer from the kernel within {}s",
                        REPLY_TIMEOUT.as_secs()
                    ),
                ),
                other => other.into(),
            },
        };
        // MSG_PEEK|MSG_TRUNC into an empty buffer returns the datagram's full length, so the
        // buffer can be sized exactly and nothing is ever truncated.
        let len = retry_eintr(|| recv(fd, &mut [], MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC))
            .map_err(socket_err)?;
        let mut buf = self.buf.borrow_mut();
        buf.resize(len, 0);
        let got = retry_eintr(|| recv(fd, &mut buf[..], MsgFlags::empty())).map_err(socket_err)?;
        decode_datagram(&buf[..got.min(len)]).map_err(|reason| NetlinkError::Decode {
            op: op.to_string(),
            reason,
        })
    }
}

enum DumpOutcome {
    Complete(Vec<RouteNetlinkMessage>),
    Interrupted,
}

fn open_socket() -> Result<Socket> {
    let socket = Socket::new(NETLINK_ROUTE).map_err(|source| NetlinkError::Socket {
        op: "open rtnetlink socket".into(),
        source,
    })?;
    // Both only improve error reports (kernel >= 4.12 / 4.2); failing to set them is harmless.
    let _ = socket.set_ext_ack(true);
    let _ = socket.set_cap_ack(true);
    // The kernel always answers, but a plugin the runtime waits on must not hang if it does
    // not: a bounded wait turns into an error naming the operation.
    let timeout = nix::sys::time::TimeVal::new(REPLY_TIMEOUT.as_secs() as _, 0);
    nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::ReceiveTimeout, &timeout)
        .map_err(|e| NetlinkError::Socket {
            op: "set the rtnetlink receive timeout".into(),
            source: e.into(),
        })?;
    Ok(socket)
}

/// How long a netlink reply may take.
const REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn retry_eintr(mut f: impl FnMut() -> nix::Result<usize>) -> nix::Result<usize> {
    let mut tries = 0;
    loop {
        match f() {
            Err(Errno::EINTR) if tries < EINTR_RETRIES => tries += 1,
            other => return other,
        }
    }
}

fn align4(len: usize) -> usize {
    (len + 3) & !3
}

/// Splits a datagram into netlink messages and decodes each.
pub(crate) fn decode_datagram(
    data: &[u8],
) -> std::result::Result<Vec<NetlinkMessage<RouteNetlinkMessage>>, String> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset + NLMSG_HDRLEN <= data.len() {
        let rest = &data[offset..];
        let len = NetlinkBuffer::new_checked(rest)
            .map_err(|e| e.to_string())?
            .length() as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(format!("bad netlink message length {len}"));
        }
        let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..len])
            .map_err(|e| e.to_string())?;
        out.push(msg);
        offset += align4(len);
    }
    Ok(out)
}

/// The extended-ack text of an error reply, if the kernel attached one.
///
/// `payload` is what follows the error code: the echoed request (only its header when
/// `NLM_F_CAPPED`) and then, when `NLM_F_ACK_TLVS`, attributes.
pub(crate) fn ext_ack_text(flags: u16, payload: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    let echoed = if flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        u32::from_ne_bytes(payload.get(0..4)?.try_into().ok()?) as usize
    };
    let tlvs = payload.get(align4(echoed)..)?;
    for nla in NlasIterator::new(tlvs) {
        let nla = nla.ok()?;
        if nla.kind() == NLMSGERR_ATTR_MSG {
            let text = nla.value();
            let text = text.split(|b| *b == 0).next().unwrap_or(text);
            return Some(String::from_utf8_lossy(text).into_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext_ack_text_after_capped_header() {
        let mut payload = vec![0u8; NLMSG_HDRLEN];
        let msg = b"Nexthop device is not up\0";
        let nla_len = 4 + msg.len();
        payload.extend_from_slice(&(nla_len as u16).to_ne_bytes());
        payload.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        payload.extend_from_slice(msg);
        payload.resize(align4(payload.len()), 0);
        assert_eq!(
            ext_ack_text(NLM_F_ACK_TLVS | NLM_F_CAPPED, &payload).as_deref(),
            Some("Nexthop device is not up")
        );
        assert_eq!(ext_ack_text(NLM_F_CAPPED, &payload), None);
    }

    #[test]
    fn ext_ack_text_tolerates_garbage() {
        assert_eq!(ext_ack_text(NLM_F_ACK_TLVS, &[1, 2]), None);
        assert_eq!(ext_ack_text(NLM_F_ACK_TLVS | NLM_F_CAPPED, &[0; 20]), None);
    }

    #[test]
    fn decode_rejects_bad_length() {
        let mut data = vec![0u8; 16];
        data[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(decode_datagram(&data).is_err());
    }
}
