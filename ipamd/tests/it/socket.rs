//! ipamd's Unix socket with a real daemon behind it, driven by the plugin's blocking client.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ipam_proto::{AddRequest, Client, ClientError, ErrorKind, MAX_FRAME_BYTES, PROTOCOL_VERSION};
use ipamd::server;
use support::*;
use tokio::sync::oneshot;

struct Served {
    socket: PathBuf,
    daemon: Arc<TestDaemon>,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

/// A short frame timeout, so the stalled-peer test waits a fraction of a second for it.
const FRAME_TIMEOUT: Duration = Duration::from_millis(200);

async fn serve(allowed_uid: u32) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let daemon = Arc::new(start(dir.path(), &ec2, &ManualClock::at(1_000)).await);
    let socket = dir.path().join("run/ipamd.sock");
    let listener = server::bind(&socket).unwrap();
    let (stop, stopped) = oneshot::channel();
    let d = Arc::clone(&daemon);
    tokio::spawn(async move {
        let settings = server::Settings {
            allowed_uid,
            frame_timeout: FRAME_TIMEOUT,
        };
        server::serve(listener, d, settings, async {
            let _ = stopped.await;
        })
        .await
    });
    Served {
        socket,
        daemon,
        stop: Some(stop),
        _dir: dir,
    }
}

fn me() -> u32 {
    nix_uid()
}

fn nix_uid() -> u32 {
    // SAFETY-free: getuid cannot fail; read it through /proc to avoid a libc dependency.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap()
}

/// Sends raw bytes and reads one reply line.
fn raw(socket: &PathBuf, bytes: &[u8]) -> String {
    let mut s = UnixStream::connect(socket).unwrap();
    s.write_all(bytes).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line
}

fn add_request(n: u32) -> AddRequest {
    AddRequest {
        key: key(n),
        pod: pod(n),
        netns: "/run/netns/x".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_client_gets_addresses_over_the_socket() {
    let mut s = serve(me()).await;
    let mode = std::fs::metadata(&s.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let socket = s.socket.clone();
    let (first, again) = tokio::task::spawn_blocking(move || {
        let c = Client::new(&socket);
        (
            c.add(add_request(1)).unwrap(),
            c.add(add_request(1)).unwrap(),
        )
    })
    .await
    .unwrap();
    assert_eq!(first.allocation.ip, again.allocation.ip);
    s.stop.take().unwrap().send(()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_gets_a_clear_error_and_changes_nothing() {
    let s = serve(me()).await;
    let before = s.daemon.pool_snapshot().to_state();
    let socket = s.socket.clone();
    let replies = tokio::task::spawn_blocking(move || {
        vec![
            raw(&socket, b"\x00\x01garbage\n"),
            raw(
                &socket,
                format!("{{\"v\":{PROTOCOL_VERSION},\"req\":{{\"op\":\"add\"}}}}\n").as_bytes(),
            ),
            raw(&socket, b"{\"v\":99,\"req\":{\"op\":\"add\"}}\n"),
            raw(&socket, &[b'x'; MAX_FRAME_BYTES + 100]),
        ]
    })
    .await
    .unwrap();
    assert!(
        replies[0].contains("\"bad_request\"") && replies[0].contains("not a JSON object"),
        "{}",
        replies[0]
    );
    assert!(
        replies[1].contains("\"bad_request\"") && replies[1].contains("missing field"),
        "{}",
        replies[1]
    );
    assert!(
        replies[2].contains("\"version_mismatch\"") && replies[2].contains("version 99"),
        "{}",
        replies[2]
    );
    assert!(
        replies[3].contains("\"bad_request\"") && replies[3].contains("longer than"),
        "{}",
        replies[3]
    );
    assert_eq!(
        s.daemon.pool_snapshot().to_state(),
        before,
        "ipamd's state is unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_with_another_uid_are_refused() {
    let s = serve(me() + 4242).await;
    let socket = s.socket.clone();
    let err =
        tokio::task::spawn_blocking(move || Client::new(&socket).add(add_request(1)).unwrap_err())
            .await
            .unwrap();
    match err {
        ClientError::Daemon(e) => {
            assert_eq!(e.kind, ErrorKind::Forbidden);
            assert!(e.message.contains("may not use"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.daemon
            .pool_snapshot()
            .counts(pool::Timestamp(1_000))
            .assigned,
        0
    );
}

#[tokio::test]
async fn bind_replaces_a_stale_socket_but_never_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipamd.sock");
    drop(server::bind(&path).unwrap());
    server::bind(&path).expect("a stale socket is replaced");
    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, b"keep").unwrap();
    let err = server::bind(&file).unwrap_err();
    assert!(err.to_string().contains("is not a socket"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stalls_mid_frame_is_dropped_while_others_are_served() {
    use std::io::Read;
    let s = serve(me()).await;
    let socket = s.socket.clone();
    let stalled = tokio::task::spawn_blocking(move || {
        let mut conn = UnixStream::connect(&socket).unwrap();
        conn.write_all(br#"{"v":1,"op":"sta"#).unwrap();
        // Bounded: if the server never closed, this read fails instead of hanging. Generous, so
        // only a server that ignores its frame timeout fails here.
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer).map(|_| answer)
    });
    let socket = s.socket.clone();
    let status = tokio::task::spawn_blocking(move || Client::new(&socket).status())
        .await
        .unwrap();
    assert!(
        status.is_ok(),
        "another peer is served meanwhile: {status:?}"
    );
    let answer = stalled
        .await
        .unwrap()
        .expect("the server closed the connection");
    assert!(answer.is_empty(), "closed without an answer: {answer:?}");
}
