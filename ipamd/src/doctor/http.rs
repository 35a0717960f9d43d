//! GET on ipamd's own HTTP endpoints (introspection, metrics), over TCP or a Unix socket.

use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::config::BindAddress;

/// A body larger than this is cut off with an error: the doctor reads endpoints, not dumps.
const MAX_BODY: usize = 16 << 20;
/// Each GET, connection to body, ends within this.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The body of `GET path` at `bind`, or why not (status other than 200 included).
pub async fn get(bind: &BindAddress, path: &str) -> Result<String, String> {
    let fetched = async {
        match bind {
            BindAddress::Tcp(addr) => {
                // A wildcard bind is reached through loopback.
                let mut addr = *addr;
                if addr.ip().is_unspecified() {
                    addr.set_ip(if addr.is_ipv4() {
                        std::net::Ipv4Addr::LOCALHOST.into()
                    } else {
                        std::net::Ipv6Addr::LOCALHOST.into()
                    });
                }
                let stream = tokio::net::TcpStream::connect(addr)
                    .await
                    .map_err(|e| format!("connecting to {addr}: {e}"))?;
                exchange(stream, path).await
            }
            BindAddress::Unix(socket) => {
                let stream = tokio::net::UnixStream::connect(socket)
                    .await
                    .map_err(|e| format!("connecting to {}: {e}", socket.display()))?;
                exchange(stream, path).await
            }
        }
    };
    tokio::time::timeout(TIMEOUT, fetched)
        .await
        .map_err(|_| format!("GET {path}: no answer within {}s", TIMEOUT.as_secs()))?
}

async fn exchange<S>(stream: S, path: &str) -> Result<String, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("GET {path}: {e}"))?;
    let driver = tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, "localhost")
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("GET {path}: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("GET {path}: {e}"))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("GET {path}: reading the body: {e}"))?
        .to_bytes();
    driver.abort();
    let text = String::from_utf8_lossy(&body).into_owned();
    if status.is_success() {
        Ok(text)
    } else {
        Err(format!("GET {path}: HTTP {status}: {}", text.trim()))
    }
}
