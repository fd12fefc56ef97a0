//! The local control socket (`latebind status`) and the optional Prometheus endpoint.
//! Both answer with a snapshot and close: a reader that stalls cannot hold the loop up for
//! long (the answer is a few kilobytes, well below a socket buffer).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The listening sockets.
pub struct Control {
    unix: UnixListener,
    path: PathBuf,
    metrics: Option<TcpListener>,
}

impl Control {
    /// Binds the control socket at `path` (replacing a stale one) and, when asked, the
    /// metrics endpoint.
    pub fn bind(path: &Path, metrics: Option<SocketAddr>) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is in use by a running daemon", path.display()),
            ));
        }
        let _ = std::fs::remove_file(path);
        let unix = UnixListener::bind(path)?;
        unix.set_nonblocking(true)?;
        let metrics = match metrics {
            Some(addr) => {
                let l = TcpListener::bind(addr)?;
                l.set_nonblocking(true)?;
                Some(l)
            }
            None => None,
        };
        Ok(Self {
            unix,
            path: path.to_owned(),
            metrics,
        })
    }

    /// The control listener.
    pub fn unix(&self) -> &UnixListener {
        &self.unix
    }

    /// The metrics listener.
    pub fn metrics(&self) -> Option<&TcpListener> {
        self.metrics.as_ref()
    }

    /// Answers every pending control connection with `json`.
    pub fn serve_status(&self, json: &str) {
        while let Ok((mut s, _)) = self.unix.accept() {
            let _ = s.set_nonblocking(false);
            let _ = s.set_write_timeout(Some(std::time::Duration::from_millis(200)));
            let _ = s.write_all(json.as_bytes());
        }
    }

    /// Answers every pending metrics connection with `text`.
    pub fn serve_metrics(&self, text: &str) {
        let Some(l) = &self.metrics else { return };
        while let Ok((mut s, _)) = l.accept() {
            let _ = s.set_read_timeout(Some(std::time::Duration::from_millis(50)));
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req);
            let _ = s.set_write_timeout(Some(std::time::Duration::from_millis(200)));
            let head = format!(
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n",
                text.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(text.as_bytes());
        }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads a daemon's status from its control socket (`latebind status`).
pub fn query(path: &Path) -> io::Result<String> {
    let mut s = UnixStream::connect(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{}: {e} (is the daemon running?)", path.display()),
        )
    })?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(2)))?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}
