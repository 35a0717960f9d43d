use std::io::{self, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use socket2::{Domain, SockAddr, Socket, Type};
use thiserror::Error;

use crate::frame::{FrameError, decode_reply, encode_request, read_frame};
use crate::message::*;

/// Why a call to ipamd failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Nothing is listening (not started, crashed, wrong path) or it did not accept in time.
    #[error("ipamd is not reachable at {path}: {source}")]
    Unavailable {
        /// Socket path.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// The connection failed or timed out after it was made.
    #[error("talking to ipamd at {path}: {source}")]
    Io {
        /// Socket path.
        path: PathBuf,
        /// Cause (a timeout shows as `WouldBlock`/`TimedOut`).
        source: io::Error,
    },
    /// The reply could not be read or understood, or speaks another protocol version.
    #[error("ipamd at {path} sent an unusable reply: {source}")]
    Protocol {
        /// Socket path.
        path: PathBuf,
        /// Cause.
        source: FrameError,
    },
    /// ipamd answered with an error.
    #[error("{0}")]
    Daemon(#[from] DaemonError),
    /// ipamd answered a different operation than asked (a daemon bug).
    #[error("ipamd answered {got} to a {asked} request")]
    WrongReply {
        /// What was asked.
        asked: &'static str,
        /// What came back.
        got: &'static str,
    },
}

impl ClientError {
    /// True when the daemon could not be reached at all (DEL then tears down from prevResult).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ClientError::Unavailable { .. })
    }

    /// True for an I/O timeout after connecting.
    pub fn is_timeout(&self) -> bool {
        matches!(self, ClientError::Io { source, .. }
            if matches!(source.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

/// A blocking client: one connection per call, bounded in time at every step.
#[derive(Clone, Debug)]
pub struct Client {
    path: PathBuf,
    connect_timeout: Duration,
    io_timeout: Duration,
}

impl Client {
    /// A client for the socket at `path`, with 2 s to connect and 30 s for the answer (an ADD may
    /// wait for the pool to grow).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            connect_timeout: Duration::from_secs(2),
            io_timeout: Duration::from_secs(30),
        }
    }

    /// Overrides both timeouts.
    pub fn with_timeouts(mut self, connect: Duration, io: Duration) -> Self {
        self.connect_timeout = connect;
        self.io_timeout = io;
        self
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connect(&self) -> Result<UnixStream, ClientError> {
        let unavailable = |source| ClientError::Unavailable {
            path: self.path.clone(),
            source,
        };
        let addr = SockAddr::unix(&self.path).map_err(unavailable)?;
        let socket =
            Socket::new(Domain::UNIX, Type::STREAM.cloexec(), None).map_err(unavailable)?;
        // A plain connect() can block when the daemon's accept backlog is full.
        socket
            .connect_timeout(&addr, self.connect_timeout)
            .map_err(unavailable)?;
        let stream = UnixStream::from(OwnedFd::from(socket));
        stream
            .set_read_timeout(Some(self.io_timeout))
            .and_then(|()| stream.set_write_timeout(Some(self.io_timeout)))
            .map_err(unavailable)?;
        Ok(stream)
    }

    /// Sends one request and waits for its reply.
    pub fn call(&self, req: &Request) -> Result<Reply, ClientError> {
        self.send(req)?.reply()
    }

    /// Sends one request without waiting: ipamd works on it while the caller does something
    /// else, then [`Pending::reply`] reads the answer.
    pub fn send(&self, req: &Request) -> Result<Pending, ClientError> {
        let mut stream = self.connect()?;
        stream
            .write_all(&encode_request(req))
            .map_err(|source| ClientError::Io {
                path: self.path.clone(),
                source,
            })?;
        Ok(Pending {
            stream,
            path: self.path.clone(),
        })
    }

    /// ADD.
    pub fn add(&self, req: AddRequest) -> Result<AddReply, ClientError> {
        self.start_add(req)?.reply()
    }

    /// ADD, sent without waiting for the reply (see [`Client::send`]).
    pub fn start_add(&self, req: AddRequest) -> Result<PendingAdd, ClientError> {
        self.send(&Request::Add(req)).map(PendingAdd)
    }

    /// DEL.
    pub fn del(&self, req: DelRequest) -> Result<DelReply, ClientError> {
        match self.call(&Request::Del(req))? {
            Reply::Del(r) => Ok(r),
            other => Err(wrong("del", &other)),
        }
    }

    /// CHECK.
    pub fn check(&self, req: CheckRequest) -> Result<CheckReply, ClientError> {
        match self.call(&Request::Check(req))? {
            Reply::Check(r) => Ok(r),
            other => Err(wrong("check", &other)),
        }
    }

    /// STATUS.
    pub fn status(&self) -> Result<StatusReply, ClientError> {
        match self.call(&Request::Status)? {
            Reply::Status(r) => Ok(r),
            other => Err(wrong("status", &other)),
        }
    }

    /// GC.
    pub fn gc(&self, req: GcRequest) -> Result<GcReply, ClientError> {
        match self.call(&Request::Gc(req))? {
            Reply::Gc(r) => Ok(r),
            other => Err(wrong("gc", &other)),
        }
    }
}

/// A request sent to ipamd whose reply is still to be read.
#[derive(Debug)]
pub struct Pending {
    stream: UnixStream,
    path: PathBuf,
}

impl Pending {
    /// Waits for the reply (bounded by the client's I/O timeout).
    pub fn reply(self) -> Result<Reply, ClientError> {
        let io = |source| ClientError::Io {
            path: self.path.clone(),
            source,
        };
        let protocol = |source| ClientError::Protocol {
            path: self.path.clone(),
            source,
        };
        let mut reader = BufReader::new(&self.stream);
        let frame = match read_frame(&mut reader) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Err(protocol(FrameError::Truncated(0))),
            Err(FrameError::Io(e)) => return Err(io(e)),
            Err(e) => return Err(protocol(e)),
        };
        Ok(decode_reply(&frame).map_err(protocol)??)
    }
}

/// An ADD sent to ipamd whose reply is still to be read.
#[derive(Debug)]
pub struct PendingAdd(Pending);

impl PendingAdd {
    /// Waits for ipamd's answer to the ADD.
    pub fn reply(self) -> Result<AddReply, ClientError> {
        match self.0.reply()? {
            Reply::Add(r) => Ok(r),
            other => Err(wrong("add", &other)),
        }
    }
}

fn wrong(asked: &'static str, got: &Reply) -> ClientError {
    let got = match got {
        Reply::Add(_) => "add",
        Reply::Del(_) => "del",
        Reply::Check(_) => "check",
        Reply::Status(_) => "status",
        Reply::Gc(_) => "gc",
    };
    ClientError::WrongReply { asked, got }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, Write};
    use std::os::unix::net::UnixListener;
    use std::thread;

    use super::*;
    use crate::frame::encode_reply;

    /// Serves one connection with `answer(request_line) -> reply bytes`.
    fn serve_once(
        answer: impl FnOnce(Vec<u8>) -> Vec<u8> + Send + 'static,
    ) -> (tempfile::TempDir, PathBuf, thread::JoinHandle<()>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipamd.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let handle = thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = Vec::new();
            reader.read_until(b'\n', &mut line).unwrap();
            let reply = answer(line);
            (&stream).write_all(&reply).unwrap();
            // Keep the connection open until the client hangs up, so a silent server really
            // is silent (bounded, in case it never does).
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let _ = reader.read_until(b'\n', &mut Vec::new());
        });
        (dir, path, handle)
    }

    #[test]
    fn an_add_is_on_its_way_before_its_reply_is_read() {
        let (arrived_tx, arrived) = std::sync::mpsc::channel();
        let (go_tx, go) = std::sync::mpsc::channel::<()>();
        let (_dir, path, server) = serve_once(move |line| {
            let Request::Add(req) = crate::decode_request(&line[..line.len() - 1]).unwrap() else {
                panic!("not an ADD");
            };
            arrived_tx.send(req.key.container_id.clone()).unwrap();
            // Answer only once the client says it is done with its other work.
            go.recv_timeout(Duration::from_secs(10)).unwrap();
            encode_reply(&Ok(Reply::Add(AddReply {
                allocation: Allocation {
                    key: req.key,
                    pod: req.pod,
                    ip: Some("10.0.0.7".parse().unwrap()),
                    ipv6: None,
                    egress_ipv4: None,
                    eni_id: "eni-1".into(),
                    device_number: 0,
                    route_table: 254,
                },
                existing: false,
            })))
        });
        let key = AttachmentKey {
            network: "aws-cni".into(),
            container_id: "c1".into(),
            ifname: "eth0".into(),
        };
        let pending = Client::new(&path)
            .start_add(AddRequest {
                key,
                pod: PodMeta::default(),
                netns: "/run/netns/x".into(),
            })
            .unwrap();
        // ipamd has the request while the caller still works.
        let seen = arrived.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(seen, "c1");
        go_tx.send(()).unwrap();
        let reply = pending.reply().unwrap();
        assert_eq!(reply.allocation.ip, Some("10.0.0.7".parse().unwrap()));
        server.join().unwrap();
    }

    #[test]
    fn a_status_call_round_trips_through_a_socket() {
        let (_dir, path, server) = serve_once(|line| {
            assert_eq!(
                crate::decode_request(&line[..line.len() - 1]).unwrap(),
                Request::Status
            );
            encode_reply(&Ok(Reply::Status(StatusReply {
                ready: true,
                reason: None,
                pool: PoolCounts {
                    total: 5,
                    assigned: 1,
                    cooling: 0,
                    available: 4,
                },
            })))
        });
        let status = Client::new(&path).status().unwrap();
        assert!(status.ready);
        assert_eq!(status.pool.available, 4);
        server.join().unwrap();
    }

    #[test]
    fn a_missing_socket_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let err = Client::new(dir.path().join("none.sock"))
            .status()
            .unwrap_err();
        assert!(err.is_unavailable(), "{err}");
        assert!(err.to_string().contains("none.sock"), "{err}");
    }

    #[test]
    fn a_silent_daemon_times_out_instead_of_hanging() {
        let (_dir, path, server) = serve_once(|_| Vec::new());
        let client =
            Client::new(&path).with_timeouts(Duration::from_secs(1), Duration::from_millis(100));
        let err = client.status().unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
        server.join().unwrap();
    }

    #[test]
    fn a_daemon_of_another_version_is_a_clear_error() {
        let (_dir, path, server) =
            serve_once(|_| b"{\"v\":7,\"ok\":{\"op\":\"status\",\"x\":1}}\n".to_vec());
        let err = Client::new(&path).status().unwrap_err();
        assert!(
            err.to_string()
                .contains("protocol version mismatch: peer speaks 7, this side 2"),
            "{err}"
        );
        server.join().unwrap();
    }

    #[test]
    fn daemon_errors_come_back_typed() {
        let (_dir, path, server) = serve_once(|_| {
            encode_reply(&Err(DaemonError::new(
                ErrorKind::NotReady,
                "restoring state",
            )))
        });
        match Client::new(&path).status().unwrap_err() {
            ClientError::Daemon(e) => assert_eq!(e.kind, ErrorKind::NotReady),
            other => panic!("{other:?}"),
        }
        server.join().unwrap();
    }

    #[test]
    fn a_reply_for_another_operation_is_reported() {
        let (_dir, path, server) =
            serve_once(|_| encode_reply(&Ok(Reply::Del(DelReply { released: None }))));
        let err = Client::new(&path).status().unwrap_err();
        assert!(
            matches!(
                err,
                ClientError::WrongReply {
                    asked: "status",
                    got: "del"
                }
            ),
            "{err}"
        );
        server.join().unwrap();
    }
}
