//! `serve` on a Unix socket (mode 0600, stale socket replaced, removed at shutdown) and on
//! TCP loopback, with a raw HTTP/1.1 GET.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::*;
use introspect::{Bind, IpamdEnv, NetworkUtilsEnv, introspection_router, serve};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

fn start(bind: Bind) -> (oneshot::Sender<()>, JoinHandle<std::io::Result<()>>) {
    let router = introspection_router(
        Fixed::new(secondary_view()),
        NetworkUtilsEnv::default(),
        IpamdEnv::default(),
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(bind, router, async move {
        let _ = stopped.await;
    }));
    (stop, task)
}

async fn get<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

/// Polls (bounded) until the server's socket file exists.
async fn wait_for(path: &Path) {
    for _ in 0..500 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never appeared", path.display());
}

#[tokio::test]
async fn unix_socket_is_root_only_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("introspect.sock");
    // A socket file left by a dead server.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());

    let (stop, task) = start(Bind::Unix(path.clone()));
    // The stale file is replaced by the new socket: wait until it answers.
    let mut stream = None;
    for _ in 0..500 {
        if let Ok(s) = tokio::net::UnixStream::connect(&path).await {
            stream = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stream = stream.expect("the server never answered on its socket");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let response = get(stream, "/v1/pool").await;
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("\"Reason\":\"available 4 < WARM_IP_TARGET 5\""));

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert!(!path.exists(), "the socket is removed at shutdown");
}

#[tokio::test]
async fn a_live_socket_or_a_regular_file_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, "keep me").unwrap();
    let (_stop, task) = start(Bind::Unix(file.clone()));
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists, "{err}");
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

    let live = dir.path().join("live.sock");
    let (stop, first) = start(Bind::Unix(live.clone()));
    wait_for(&live).await;
    let (_stop2, second) = start(Bind::Unix(live.clone()));
    let err = second.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
    stop.send(()).unwrap();
    first.await.unwrap().unwrap();
}

#[tokio::test]
async fn tcp_loopback_serves() {
    // Pick a free port, then let serve bind it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let (stop, task) = start(Bind::Tcp(addr));
    let mut stream = None;
    for _ in 0..500 {
        if let Ok(s) = tokio::net::TcpStream::connect(addr).await {
            stream = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let response = get(stream.expect("never connected"), "/").await;
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("\"AvailableCommands\""), "{response}");
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(Bind::Tcp(addr).to_string(), format!("127.0.0.1:{port}"));
    assert_eq!(
        Bind::Unix("/run/x.sock".into()).to_string(),
        "unix:/run/x.sock"
    );
}
