//! The HTTP server under hostile or broken clients: slow headers, big headers and bodies,
//! wrong methods, too many connections, clients that never read, stalled snapshots, and
//! shutdown with such clients connected. Every wait is bounded by `PATIENCE`; nothing
//! asserts how fast the server is.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::raw::*;
use common::*;
use introspect::{Bind, Limits, Source, limits, serve_with};
use testkit::http::{get_request, status};
use testkit::wait::wait_for_async;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn fixed() -> Arc<dyn Source> {
    Fixed::new(secondary_view())
}

/// Limits whose timeouts a test can wait out.
fn quick() -> Limits {
    Limits {
        header_read_timeout: Duration::from_millis(200),
        ..Limits::default()
    }
}

#[test]
fn the_defaults_are_the_documented_constants() {
    let d = Limits::default();
    assert_eq!(d.header_read_timeout, limits::HEADER_READ_TIMEOUT);
    assert_eq!(d.header_read_timeout, Duration::from_secs(10));
    assert_eq!(d.max_header_bytes, 16 * 1024);
    assert_eq!(d.max_connections, 64);
    assert_eq!(d.max_body_bytes, 1024);
    assert_eq!(d.request_timeout, Duration::from_secs(10));
    assert_eq!(d.max_connection_age, Duration::from_secs(60));
    assert_eq!(d.shutdown_grace, Duration::from_secs(5));
}

#[tokio::test]
async fn a_slowloris_is_disconnected_while_others_are_served() {
    let server = Server::start(quick(), fixed()).await;
    let mut slow = server.connect().await;
    slow.write_all(b"GET /metr").await.unwrap();

    // Another client is served while the slow one dawdles.
    server.assert_serving().await;

    // The slow one is closed without a response (the bound is PATIENCE, the timeout 200 ms).
    let received = read_until_closed(&mut slow).await;
    assert!(
        received.is_empty(),
        "{}",
        String::from_utf8_lossy(&received)
    );
    server.assert_serving().await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_slowloris_holding_the_only_slot_gives_it_up() {
    let limits = Limits {
        max_connections: 1,
        ..quick()
    };
    let server = Server::start(limits, fixed()).await;
    let mut slow = server.connect().await;
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    // Queued behind the slow client, served once its header timeout frees the slot.
    let response = server.get("/metrics").await;
    assert_eq!(status(&response), Some(200), "{response}");
    assert!(read_until_closed(&mut slow).await.is_empty());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let server = Server::start(quick(), fixed()).await;
    let mut conn = server.connect().await;
    conn.write_all(b"GET /v1/pool HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // One response, then the connection idles and the server closes it.
    let received = String::from_utf8(read_until_closed(&mut conn).await).unwrap();
    assert_eq!(status(&received), Some(200), "{received}");
    assert_eq!(received.matches("HTTP/1.1 ").count(), 1, "{received}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn an_oversized_header_gets_431_and_the_server_keeps_serving() {
    let limits = Limits {
        max_header_bytes: 1024,
        ..quick()
    };
    let server = Server::start(limits, fixed()).await;
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(4096)
    );
    let response = request(server.connect().await, &big).await;
    assert_eq!(status(&response), Some(431), "{response}");
    // Just under the limit is fine.
    let fits = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
        "a".repeat(900)
    );
    let response = request(server.connect().await, &fits).await;
    assert_eq!(status(&response), Some(200), "{response}");
    server.assert_serving().await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413_whatever_its_framing() {
    let server = Server::start(quick(), fixed()).await;
    let body = "b".repeat(2048);
    let sized = format!(
        "GET /v1/enis HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let response = request(server.connect().await, &sized).await;
    assert_eq!(status(&response), Some(413), "{response}");
    assert!(response.contains("over the 1024-byte limit"), "{response}");

    // Content-Length alone decides: nothing need be sent.
    let claimed = "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n";
    let response = request(server.connect().await, claimed).await;
    assert_eq!(status(&response), Some(413), "{response}");

    let chunked = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    let response = request(server.connect().await, &chunked).await;
    assert_eq!(status(&response), Some(413), "{response}");

    // A small body on a GET is tolerated.
    let small =
        "GET /v1/pool HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello";
    let response = request(server.connect().await, small).await;
    assert_eq!(status(&response), Some(200), "{response}");
    server.assert_serving().await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn only_get_and_head_are_allowed() {
    let server = Server::start(quick(), fixed()).await;
    for path in ["/metrics", "/v1/enis", "/v1/pods", "/", "/no/such/path"] {
        for method in ["POST", "PUT", "DELETE", "PATCH"] {
            let req = format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{{}}"
            );
            let response = request(server.connect().await, &req).await;
            assert_eq!(status(&response), Some(405), "{method} {path}: {response}");
        }
        let head = format!("HEAD {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let response = request(server.connect().await, &head).await;
        assert_eq!(status(&response), Some(200), "HEAD {path}: {response}");
        assert!(
            response.ends_with("\r\n\r\n"),
            "HEAD has no body: {response}"
        );
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn beyond_the_connection_cap_clients_wait_and_are_served_once_a_slot_frees() {
    let limits = Limits {
        max_connections: 2,
        header_read_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let server = Server::start(limits, fixed()).await;
    let first = server.connect().await;
    let second = server.connect().await;

    let mut third = server.connect().await;
    third
        .write_all(get_request("/metrics").as_bytes())
        .await
        .unwrap();
    // With both slots held, the third is not served. (A correct server never answers here,
    // so this short wait cannot fail spuriously.)
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut byte)).await;
    assert!(early.is_err(), "served beyond the cap: {early:?}");

    drop(first);
    let response = String::from_utf8(read_until_closed(&mut third).await).unwrap();
    assert_eq!(status(&response), Some(200), "{response}");
    drop(second);
    server.assert_serving().await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_that_never_reads_is_dropped_at_the_connection_age_limit() {
    let limits = Limits {
        max_connections: 1,
        header_read_timeout: Duration::from_secs(60),
        max_connection_age: Duration::from_millis(300),
        shutdown_grace: Duration::from_millis(200),
        ..Limits::default()
    };
    let server = Server::start(limits, fixed()).await;
    let mut flood = server.connect().await;
    // Pipelined requests whose responses are never read: the server ends up blocked writing
    // into full socket buffers, holding the only slot.
    let flooding = tokio::spawn(async move {
        let batch = "GET /v1/enis HTTP/1.1\r\nHost: x\r\n\r\n".repeat(1000);
        for _ in 0..1000 {
            if flood.write_all(batch.as_bytes()).await.is_err() {
                return true;
            }
        }
        false
    });
    let response = server.get("/metrics").await;
    assert_eq!(status(&response), Some(200), "{response}");
    let dropped = tokio::time::timeout(PATIENCE, flooding).await;
    assert!(
        matches!(dropped, Ok(Ok(true))),
        "the flooding connection was not dropped: {dropped:?}"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_stalled_snapshot_gets_503_after_the_request_timeout() {
    let stuck = Stuck::new(secondary_view());
    let limits = Limits {
        request_timeout: Duration::from_millis(200),
        ..quick()
    };
    let server = Server::start(limits, Arc::clone(&stuck) as Arc<dyn Source>).await;
    let response = server.get("/v1/pods").await;
    assert_eq!(status(&response), Some(503), "{response}");
    assert!(response.contains("no response within 200ms"), "{response}");
    stuck.release();
    server.assert_serving().await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_body_that_never_arrives_gets_408() {
    let limits = Limits {
        request_timeout: Duration::from_millis(200),
        ..quick()
    };
    let server = Server::start(limits, fixed()).await;
    let mut conn = server.connect().await;
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        .await
        .unwrap();
    let response = String::from_utf8(read_until_closed(&mut conn).await).unwrap();
    assert_eq!(status(&response), Some(408), "{response}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_lets_a_request_in_flight_finish() {
    let stuck = Stuck::new(secondary_view());
    let server = Server::start(quick(), Arc::clone(&stuck) as Arc<dyn Source>).await;
    let mut conn = server.connect().await;
    conn.write_all(get_request("/v1/pool").as_bytes())
        .await
        .unwrap();
    stuck.wait_entered().await;
    let mut server = server;
    server.signal_stop();
    // Still answered after the shutdown signal.
    stuck.release();
    let response = String::from_utf8(read_until_closed(&mut conn).await).unwrap();
    assert_eq!(status(&response), Some(200), "{response}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_does_not_wait_for_a_stuck_client_beyond_the_grace() {
    let limits = Limits {
        header_read_timeout: Duration::from_secs(600),
        shutdown_grace: Duration::from_millis(200),
        ..Limits::default()
    };
    let server = Server::start(limits, fixed()).await;
    let mut slow = server.connect().await;
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    server.assert_serving().await;
    // Returns within PATIENCE although the header timeout is ten minutes.
    server.stop().await.unwrap();
    assert!(read_until_closed(&mut slow).await.is_empty());
}

#[tokio::test]
async fn unworkable_limits_are_refused_before_binding() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("never.sock");
    let limits = Limits {
        max_connections: 0,
        ..Limits::default()
    };
    let err = serve_with(Bind::Unix(path.clone()), router(fixed()), limits, async {})
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("max_connections"), "{err}");
    assert!(!path.exists());
}

#[tokio::test]
async fn the_unix_socket_has_the_same_limits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("introspect.sock");
    let limits = Limits {
        max_header_bytes: 1024,
        ..quick()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve_with(
        Bind::Unix(path.clone()),
        router(fixed()),
        limits,
        async move {
            let _ = stopped.await;
        },
    ));
    let mut slow = wait_for_async(
        PATIENCE,
        "the server to answer on its socket",
        async || tokio::net::UnixStream::connect(&path).await.ok(),
        tokio::time::sleep,
    )
    .await;
    slow.write_all(b"GET /metr").await.unwrap();

    let unix = || tokio::net::UnixStream::connect(&path);
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(4096)
    );
    let response = request(unix().await.unwrap(), &big).await;
    assert_eq!(status(&response), Some(431), "{response}");
    let response = request(unix().await.unwrap(), "POST /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(status(&response), Some(405), "{response}");
    let garbage = exchange(unix().await.unwrap(), &[0u8, 0xff, 0x16, 3, 1, 0, 0x10]).await;
    assert!(!garbage.starts_with(b"HTTP/1.1 2"), "{garbage:?}");
    assert!(read_until_closed(&mut slow).await.is_empty());
    let response = request(unix().await.unwrap(), &get_request("/metrics")).await;
    assert_eq!(status(&response), Some(200), "{response}");

    stop.send(()).unwrap();
    tokio::time::timeout(PATIENCE, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!path.exists(), "the socket is removed at shutdown");
}
