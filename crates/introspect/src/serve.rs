//! Serving a router on TCP or on a root-only Unix socket until shutdown.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use axum::Router;
use axum::serve::Listener;
use tokio::net::{TcpListener, UnixListener};

use crate::accept;
use crate::limits::Limits;

/// Where to listen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bind {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket path; the socket is made mode 0600 (root-only for a root daemon).
    Unix(PathBuf),
}

impl fmt::Display for Bind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bind::Tcp(addr) => write!(f, "{addr}"),
            Bind::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// Serves `router` on `bind` until `shutdown` completes, then lets open requests finish;
/// the same as [`serve_with`] with [`Limits::default`].
///
/// For a Unix socket, a stale socket file left by an earlier run is removed first (a live one,
/// answering connections, is refused with `AddrInUse`; anything that is not a socket is left
/// alone and refused with `AlreadyExists`), the new socket is made mode 0600 right after bind,
/// and it is removed again at shutdown.
pub async fn serve(
    bind: Bind,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(bind, router, Limits::default(), shutdown).await
}

/// [`serve`] under the given [`Limits`] (header read timeout, header size, connection cap,
/// body size, request time, connection age, shutdown grace). Limits that cannot work (zero
/// connections, a zero timeout) are refused with `InvalidInput` before binding.
pub async fn serve_with(
    bind: Bind,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    limits.check()?;
    match bind {
        Bind::Tcp(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|e| context(e, format!("binding {addr}")))?;
            accept::run(listener, router, limits, shutdown).await
        }
        Bind::Unix(path) => {
            remove_stale_socket(&path)?;
            let listener = UnixListener::bind(&path)
                .map_err(|e| context(e, format!("binding unix:{}", path.display())))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| context(e, format!("making {} mode 0600", path.display())))?;
            let served = accept::run(listener, router, limits, shutdown).await;
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "removing the socket at shutdown failed");
            }
            served
        }
    }
}

/// [`serve_with`] on a listener the caller has bound (a TCP listener on port 0 in tests, or
/// one handed over by a supervisor). The caller owns the listener's address: no socket file
/// is made 0600 or removed here.
pub async fn serve_on<L>(
    listener: L,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    L: Listener,
    L::Addr: fmt::Debug,
{
    accept::run(listener, router, limits, shutdown).await
}

fn remove_stale_socket(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(context(e, format!("inspecting {}", path.display()))),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            ),
        ));
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{} is in use by a running server", path.display()),
        ));
    }
    std::fs::remove_file(path)
        .map_err(|e| context(e, format!("removing stale socket {}", path.display())))
}

fn context(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}
