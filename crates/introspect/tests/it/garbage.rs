//! Garbage on the wire: whatever bytes a client sends, the server answers with an error or
//! closes the connection, never panics, and keeps serving `/metrics` afterwards.

use crate::common;

use std::time::Duration;

use common::raw::*;
use common::*;
use introspect::Limits;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn limits() -> Limits {
    Limits {
        header_read_timeout: Duration::from_millis(200),
        request_timeout: Duration::from_millis(500),
        ..Limits::default()
    }
}

/// Sends `bytes`, checks that any answer is an HTTP error (or a success only for a request
/// that happened to be valid), then that the server still serves.
async fn abuse(server: &Server, what: &str, bytes: &[u8]) {
    let received = exchange(server.connect().await, bytes).await;
    let text = String::from_utf8_lossy(&received);
    assert!(
        received.is_empty() || text.starts_with("HTTP/1."),
        "{what}: not an HTTP response: {text:?}"
    );
    server.assert_serving().await;
}

/// The first bytes of a TLS 1.2/1.3 ClientHello: a handshake record, then filler.
fn client_hello() -> Vec<u8> {
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4, 0x03, 0x03,
    ];
    hello.extend((0u8..32).map(|i| i.wrapping_mul(37)));
    hello.extend([0x00, 0x00, 0x04, 0x13, 0x01, 0x13, 0x02, 0x01, 0x00]);
    hello.resize(205, 0);
    hello
}

#[tokio::test]
async fn known_garbage_never_takes_the_server_down() {
    let server = Server::start(limits(), Fixed::new(secondary_view())).await;
    let huge_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(1 << 20));
    let huge_header = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "h".repeat(64 * 1024)
    );
    let many_headers = format!(
        "GET / HTTP/1.1\r\n{}\r\n",
        (0..500)
            .map(|i| format!("X-{i}: y\r\n"))
            .collect::<String>()
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("nothing", Vec::new()),
        ("zeros", vec![0; 64 * 1024]),
        ("all byte values", (0..=255u8).cycle().take(10_000).collect()),
        ("1 MiB request line", huge_line.into_bytes()),
        ("64 KiB header", huge_header.into_bytes()),
        ("500 headers", many_headers.into_bytes()),
        ("endless blank lines", b"\r\n".repeat(100_000)),
        (
            "HTTP/2 preface",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00".to_vec(),
        ),
        ("TLS ClientHello", client_hello()),
        ("bad version", b"GET / HTTP/9.9\r\n\r\n".to_vec()),
        ("bad method", b"G\x00T / HTTP/1.1\r\n\r\n".to_vec()),
        ("no path", b"GET HTTP/1.1\r\n\r\n".to_vec()),
        (
            "header without colon",
            b"GET / HTTP/1.1\r\nnot a header\r\n\r\n".to_vec(),
        ),
        (
            "content-length overflow",
            b"GET / HTTP/1.1\r\nContent-Length: 184467440737095516160\r\n\r\n".to_vec(),
        ),
        (
            "two content-lengths",
            b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab".to_vec(),
        ),
        (
            "bad chunk size",
            b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
                .to_vec(),
        ),
        (
            "chunked and content-length",
            b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
                .to_vec(),
        ),
        (
            "upgrade to websocket",
            b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n".to_vec(),
        ),
        (
            "absolute-form and CONNECT",
            b"CONNECT example.com:443 HTTP/1.1\r\n\r\nGET http://x/metrics HTTP/1.1\r\n\r\n"
                .to_vec(),
        ),
        ("HTTP/0.9", b"GET /metrics\r\n".to_vec()),
    ];
    for (what, bytes) in &cases {
        abuse(&server, what, bytes).await;
    }
    // A client that resets instead of closing.
    let conn = server.connect().await;
    conn.set_zero_linger().unwrap();
    drop(conn);
    server.assert_serving().await;
    server.stop().await.unwrap();
}

fn garbage() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Anything at all.
        prop::collection::vec(any::<u8>(), 0..4096),
        // A plausible start, then anything.
        (
            prop::sample::select(vec![
                "GET / HTTP/1.1\r\n",
                "GET /metrics HTTP/1.1\r\nHost: "
            ]),
            prop::collection::vec(any::<u8>(), 0..2048),
        )
            .prop_map(|(start, rest)| {
                let mut bytes = start.as_bytes().to_vec();
                bytes.extend(rest);
                bytes
            }),
        // Header-shaped lines of random printable text.
        prop::collection::vec("[ -~]{0,80}", 0..40).prop_map(|lines| {
            let mut text = String::from("GET /v1/enis HTTP/1.1\r\n");
            for line in lines {
                text.push_str(&line);
                text.push_str("\r\n");
            }
            text.push_str("\r\n");
            text.into_bytes()
        }),
    ]
}

#[test]
fn random_garbage_never_takes_the_server_down() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(Server::start(limits(), Fixed::new(secondary_view())));
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&garbage(), |bytes| {
            rt.block_on(abuse(&server, "random bytes", &bytes));
            Ok(())
        })
        .unwrap();
    rt.block_on(server.stop()).unwrap();
}
