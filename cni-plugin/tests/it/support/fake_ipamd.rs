//! A fake ipamd: serves ipam-proto frames on a Unix socket in a temp dir, answers with a
//! scripted responder and records every request it decoded.

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use ipam_proto::{
    AddReply, Allocation, AttachmentKey, CheckReply, DaemonError, DelReply, ErrorKind, GcReply,
    PoolCounts, Reply, Request, StatusReply, decode_request, encode_reply, read_frame,
};

/// Answers one request.
pub type Responder = Box<dyn FnMut(&Request) -> Result<Reply, DaemonError> + Send>;

pub struct FakeIpamd {
    dir: tempfile::TempDir,
    path: PathBuf,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeIpamd {
    /// Serves `responder` until dropped.
    pub fn start(
        responder: impl FnMut(&Request) -> Result<Reply, DaemonError> + Send + 'static,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipamd.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let requests = Arc::clone(&requests);
            let stop = Arc::clone(&stop);
            let mut responder: Responder = Box::new(responder);
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        serve(stream, &requests, &mut responder);
                    }
                }
            })
        };
        FakeIpamd {
            dir,
            path,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    /// A small stateful ipamd: ADD hands out `first_ip`, then the next addresses, all on the
    /// ENI whose table is `route_table` (idempotent per key); DEL releases; CHECK reports;
    /// STATUS is ready; GC releases the network's attachments not listed.
    pub fn pool(first_ip: Ipv4Addr, route_table: u32) -> Self {
        Self::pool_of(Some(first_ip), None, route_table)
    }

    /// [`Self::pool`] for IPv6 mode (`first_ipv4` `None`: IPv6-only pods) or dual-stack
    /// (both): each family's addresses count up from its first one; IPv6 ones are in main.
    pub fn pool_of(
        first_ipv4: Option<Ipv4Addr>,
        first_ipv6: Option<Ipv6Addr>,
        route_table: u32,
    ) -> Self {
        let mut held: BTreeMap<AttachmentKey, Allocation> = BTreeMap::new();
        let mut given = 0u32;
        Self::start(move |req| match req {
            Request::Add(add) => {
                let existing = held.contains_key(&add.key);
                let allocation = held.entry(add.key.clone()).or_insert_with(|| {
                    let ip = first_ipv4.map(|ip| Ipv4Addr::from(u32::from(ip) + given));
                    let ipv6 =
                        first_ipv6.map(|ip| Ipv6Addr::from(u128::from(ip) + u128::from(given)));
                    given += 1;
                    Allocation {
                        key: add.key.clone(),
                        pod: add.pod.clone(),
                        ip,
                        ipv6,
                        egress_ipv4: None,
                        eni_id: format!("eni-{route_table}"),
                        device_number: if route_table == 254 {
                            0
                        } else {
                            route_table - 1
                        },
                        route_table,
                    }
                });
                Ok(Reply::Add(AddReply {
                    allocation: allocation.clone(),
                    existing,
                }))
            }
            Request::Del(del) => Ok(Reply::Del(DelReply {
                released: held.remove(&del.key),
            })),
            Request::Check(check) => match held.get(&check.key) {
                Some(a) => Ok(Reply::Check(CheckReply {
                    allocation: a.clone(),
                })),
                None => Err(DaemonError::new(
                    ErrorKind::UnknownAttachment,
                    format!("no allocation for {}", check.key),
                )),
            },
            Request::Status => Ok(ready()),
            Request::Gc(gc) => {
                let gone: Vec<AttachmentKey> =
                    held.keys()
                        .filter(|k| {
                            k.network == gc.network
                                && !gc.valid.iter().any(|v| {
                                    v.container_id == k.container_id && v.ifname == k.ifname
                                })
                        })
                        .cloned()
                        .collect();
                let released = gone.iter().filter_map(|k| held.remove(k)).collect();
                Ok(Reply::Gc(GcReply { released }))
            }
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn path_str(&self) -> String {
        self.path.display().to_string()
    }

    /// Every request decoded so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// A socket path in this fake's temp dir where nothing listens.
    pub fn dead_path(&self) -> String {
        self.dir.path().join("nobody.sock").display().to_string()
    }
}

impl Drop for FakeIpamd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// STATUS: ready.
pub fn ready() -> Reply {
    Reply::Status(StatusReply {
        ready: true,
        reason: None,
        pool: PoolCounts {
            total: 10,
            assigned: 1,
            cooling: 0,
            available: 9,
        },
    })
}

fn serve(stream: UnixStream, requests: &Mutex<Vec<Request>>, responder: &mut Responder) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    while let Ok(Some(frame)) = read_frame(&mut reader) {
        let outcome = match decode_request(&frame) {
            Ok(req) => {
                requests.lock().unwrap().push(req.clone());
                responder(&req)
            }
            Err(e) => Err(e),
        };
        if (&stream).write_all(&encode_reply(&outcome)).is_err() {
            return;
        }
    }
}
