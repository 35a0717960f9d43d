//! `serve` on a Unix socket (mode 0600, stale socket replaced, removed at shutdown) and on
//! TCP loopback, with a raw HTTP/1.1 GET.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::raw::PATIENCE;
use common::*;
use introspect::{Bind, IpamdEnv, NetworkUtilsEnv, introspection_router, serve};
use testkit::http::get_request;
use testkit::wait::wait_for_async;
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
    stream
        .write_all(get_request(path).as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

/// Waits (bounded) until the server's socket file exists.
async fn wait_for_socket(path: &Path) {
    wait_for_async(
        PATIENCE,
        "the server's socket file",
        async || path.exists().then_some(()),
        tokio::time::sleep,
    )
    .await
}

/// Connects (bounded: the server may not listen yet) to its Unix socket.
async fn connect_unix(path: &Path) -> tokio::net::UnixStream {
    wait_for_async(
        PATIENCE,
        "the server to answer on its socket",
        async || tokio::net::UnixStream::connect(path).await.ok(),
        tokio::time::sleep,
    )
    .await
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
    let stream = connect_unix(&path).await;
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
    wait_for_socket(&live).await;
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
    let stream = wait_for_async(
        PATIENCE,
        "the server to listen on its port",
        async || tokio::net::TcpStream::connect(addr).await.ok(),
        tokio::time::sleep,
    )
    .await;
    let response = get(stream, "/").await;
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
