//! The accept loop: HTTP/1 connections served under [`Limits`], a bounded number at a
//! time, each closed by its age or by shutdown within a grace period.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;

use axum::Router;
use axum::serve::Listener;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::guard;
use crate::limits::Limits;

/// hyper's read buffer, which holds the headers being parsed. Why this size: hyper's default
/// (~400 KB) is far more than a GET needs, and hyper refuses anything under 8 KiB.
const READ_BUF_BYTES: usize = 64 * 1024;

type Service = TowerToHyperService<Router>;

/// Serves `router` on `listener` until `shutdown`, then stops accepting, asks open
/// connections to close after their current response, and returns once all have closed
/// (a connection still open after [`Limits::shutdown_grace`] is dropped).
pub(crate) async fn run<L>(
    listener: L,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()>
where
    L: Listener,
    L::Addr: fmt::Debug,
{
    let slots = limits.check()?;
    let service = TowerToHyperService::new(guard::apply(router, &limits));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(READ_BUF_BYTES.max(limits.max_header_bytes));
    let free = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopped) = watch::channel(false);

    let mut listener = listener;
    let mut shutdown = pin!(shutdown);
    loop {
        // A slot first, then accept: beyond the cap, clients wait in the listen backlog.
        let permit = tokio::select! {
            permit = Arc::clone(&free).acquire_owned() => permit,
            () = &mut shutdown => break,
        };
        // The semaphore is never closed, so this does not happen.
        let Ok(permit) = permit else { break };
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let conn = http.serve_connection(TokioIo::new(io), service.clone());
        tokio::spawn(drive(
            conn,
            format!("{peer:?}"),
            limits,
            stopped.clone(),
            permit,
        ));
    }
    drop(listener);
    stop.send_replace(true);
    // Every connection task holds a slot until it ends, so all slots free means all closed.
    let _all = free
        .acquire_many(slots)
        .await
        .map_err(|e| io::Error::other(format!("waiting for connections to close: {e}")))?;
    Ok(())
}

/// Serves one connection until it ends, reaches its age limit, or the server shuts down;
/// holds `_slot` until then. Errors are the client's doing (resets, garbage, timeouts), so
/// they are logged at debug and end only this connection.
async fn drive<I>(
    conn: http1::Connection<TokioIo<I>, Service>,
    peer: String,
    limits: Limits,
    mut stopped: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut conn = pin!(conn);
    let why = tokio::select! {
        ended = conn.as_mut() => return log_end(&peer, ended),
        _ = stopped.wait_for(|stopped| *stopped) => "the server is shutting down",
        () = tokio::time::sleep(limits.max_connection_age) => "the connection reached its age limit",
    };
    // Lets the response in progress, if any, finish; an idle connection closes at once.
    conn.as_mut().graceful_shutdown();
    match tokio::time::timeout(limits.shutdown_grace, conn).await {
        Ok(ended) => log_end(&peer, ended),
        Err(_) => tracing::debug!(
            %peer,
            "dropping an HTTP connection still open {} after {why}",
            humantime::format_duration(limits.shutdown_grace)
        ),
    }
}

fn log_end(peer: &str, ended: hyper::Result<()>) {
    if let Err(e) = ended {
        tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
    }
}
