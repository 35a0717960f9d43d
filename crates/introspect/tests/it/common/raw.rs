//! A served router and a raw-bytes client, for abusing the HTTP server.

use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use introspect::{
    IpamdEnv, Limits, Metrics, NetworkUtilsEnv, PoolView, Source, introspection_router,
    metrics_router, serve_on,
};
use testkit::http::get_request;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

/// The bound on every wait for the server: generous, so only a hang fails a test.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Both routers on one loopback port, as a hostile client sees them.
pub struct Server {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    pub async fn start(limits: Limits, source: Arc<dyn Source>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_on(listener, router(source), limits, async move {
            let _ = stopped.await;
        }));
        Server {
            addr,
            stop: Some(stop),
            task,
        }
    }

    /// Signals shutdown without waiting for it.
    pub fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Signals shutdown and waits (bounded) for `serve_on` to return.
    pub async fn stop(mut self) -> std::io::Result<()> {
        self.signal_stop();
        tokio::time::timeout(PATIENCE, &mut self.task)
            .await
            .expect("the server did not stop within the grace period")
            .unwrap()
    }

    pub async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }

    /// `GET path` on a new connection; the whole response.
    pub async fn get(&self, path: &str) -> String {
        request(self.connect().await, &get_request(path)).await
    }

    /// Asserts the server still answers `/metrics` and `/v1/pods`.
    pub async fn assert_serving(&self) {
        for path in ["/metrics", "/v1/pods"] {
            let response = self.get(path).await;
            assert!(
                response.starts_with("HTTP/1.1 200 OK\r\n"),
                "{path} after abuse: {response}"
            );
        }
    }
}

pub fn router(source: Arc<dyn Source>) -> axum::Router {
    let metrics = Arc::new(Metrics::new("v-test").unwrap());
    introspection_router(
        Arc::clone(&source),
        NetworkUtilsEnv::default(),
        IpamdEnv::default(),
    )
    .merge(metrics_router(metrics, source))
}

/// Writes `bytes`, then reads until the server closes (bounded by [`PATIENCE`]).
pub async fn request<S: AsyncRead + AsyncWrite + Unpin>(stream: S, bytes: &str) -> String {
    String::from_utf8_lossy(&send(stream, bytes.as_bytes(), false).await).into_owned()
}

/// Writes `bytes` and half-closes, then reads until end of stream or an error such as a
/// reset. Half-closing makes the server give up at once on an incomplete request (hyper
/// does not support half-closed connections) instead of at its header timeout.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(stream: S, bytes: &[u8]) -> Vec<u8> {
    send(stream, bytes, true).await
}

/// Writes `bytes` (the write may fail once the server has given up on the client) while
/// reading everything the server sends until it closes or resets the connection; panics if
/// it does neither within [`PATIENCE`].
async fn send<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    bytes: &[u8],
    half_close: bool,
) -> Vec<u8> {
    let (mut reader, mut writer) = tokio::io::split(&mut stream);
    let write = async {
        if writer.write_all(bytes).await.is_ok() && half_close {
            let _ = writer.shutdown().await;
        }
    };
    let read = read_until_closed(&mut reader);
    let ((), received) = tokio::join!(write, read);
    received
}

/// Everything the server sends until it closes the connection or resets it; panics if it
/// does neither within [`PATIENCE`].
pub async fn read_until_closed<R: AsyncRead + Unpin>(reader: &mut R) -> Vec<u8> {
    let mut received = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, reader.read(&mut chunk)).await {
            Err(_) => panic!(
                "the server kept the connection open for {PATIENCE:?}; received {:?}",
                String::from_utf8_lossy(&received)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return received,
            Ok(Ok(n)) => received.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A source whose snapshot blocks until released (bounded by [`PATIENCE`]), like ipamd's
/// lock held by a slow operation.
pub struct Stuck {
    view: PoolView,
    /// Told each time a snapshot is asked for.
    entered: Notify,
    released: Mutex<bool>,
    release: Condvar,
}

impl Stuck {
    pub fn new(view: PoolView) -> Arc<Stuck> {
        Arc::new(Stuck {
            view,
            entered: Notify::new(),
            released: Mutex::new(false),
            release: Condvar::new(),
        })
    }

    pub fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.release.notify_all();
    }

    /// Waits (bounded) until a snapshot has been asked for.
    pub async fn wait_entered(&self) {
        tokio::time::timeout(PATIENCE, self.entered.notified())
            .await
            .expect("no snapshot was ever asked for");
    }
}

impl Source for Stuck {
    fn view(&self) -> PoolView {
        self.entered.notify_one();
        // Called on a blocking thread (introspect's spawn_blocking), so it may block here.
        let released = self.released.lock().unwrap();
        let _ = self
            .release
            .wait_timeout_while(released, PATIENCE, |released| !*released)
            .unwrap();
        self.view.clone()
    }
}
