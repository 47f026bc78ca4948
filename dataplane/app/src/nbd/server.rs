//! The NBD server: listeners, one thread per client, clean shutdown.
//!
//! Layer: gateway. Owns the listening sockets (`unix:PATH`,
//! `tcp:HOST:PORT`), accepts any number of clients, runs each one's
//! handshake and transmission phase on a thread of its own (with a writer
//! thread beside it, [`super::transmission`]), and keeps a handle on every
//! open connection so that [`Server::stop`] can end them: accepting stops,
//! each connection's read side is shut (its reader sees end-of-file
//! between requests), the requests already read finish and are answered,
//! then the connections close. Never panics on a client's doing.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufReader};
use std::net::{Shutdown, TcpListener, ToSocketAddrs};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::backend::Backend;
use super::handshake::{self, Export, Outcome};
use super::stats::{CloseReason, Snapshot, Stats};
use super::stream::Stream;
use super::transmission::{self, End};

/// A client that has not chosen an export within this long is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often an idle listener looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(5);
/// The reader's buffer (requests and write payloads).
const READ_BUFFER: usize = 256 << 10;

/// Where to listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A Unix socket at this path (`unix:PATH`).
    Unix(PathBuf),
    /// A TCP address (`tcp:HOST:PORT`; port 0 picks a free one).
    Tcp(String),
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a path, as in unix:/tmp/nbd.sock".into());
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        if let Some(addr) = s.strip_prefix("tcp:") {
            let usable = match addr.rsplit_once(':') {
                Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok(),
                None => false,
            };
            if !usable {
                return Err(format!(
                    "tcp:{addr}: want tcp:HOST:PORT, as in tcp:127.0.0.1:10809"
                ));
            }
            return Ok(Listen::Tcp(addr.to_string()));
        }
        Err(format!(
            "{s}: want unix:PATH or tcp:HOST:PORT (as in unix:/tmp/nbd.sock, tcp:127.0.0.1:10809)"
        ))
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Unix(p) => write!(f, "unix:{}", p.display()),
            Listen::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl Listener {
    fn bind(listen: &Listen) -> Result<Listener, String> {
        match listen {
            Listen::Unix(path) => {
                remove_stale_socket(path)?;
                let l = UnixListener::bind(path).map_err(|e| format!("{listen}: {e}"))?;
                Ok(Listener::Unix(l, path.clone()))
            }
            Listen::Tcp(addr) => {
                let addrs: Vec<_> = addr
                    .to_socket_addrs()
                    .map_err(|e| format!("{listen}: {e}"))?
                    .collect();
                let l = TcpListener::bind(&addrs[..]).map_err(|e| format!("{listen}: {e}"))?;
                Ok(Listener::Tcp(l))
            }
        }
    }

    /// The address bound (a TCP port 0 resolved).
    fn bound(&self) -> String {
        match self {
            Listener::Unix(_, p) => format!("unix:{}", p.display()),
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => format!("tcp:{a}"),
                Err(_) => "tcp:?".into(),
            },
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Unix(l, _) => l.set_nonblocking(true),
            Listener::Tcp(l) => l.set_nonblocking(true),
        }
    }

    fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Unix(l, _) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                Ok(Stream::Unix(s))
            }
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                // Replies are small and must not wait for Nagle.
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
        }
    }
}

/// A socket file left by a server that is gone is removed; a live one, or
/// a path that is not a socket, is an error.
fn remove_stale_socket(path: &PathBuf) -> Result<(), String> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(format!(
            "unix:{}: exists and is not a socket",
            path.display()
        ));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(format!(
            "unix:{}: another server is listening there",
            path.display()
        ));
    }
    std::fs::remove_file(path).map_err(|e| format!("unix:{}: {e}", path.display()))
}

/// State every thread of the server shares.
struct Shared {
    export: Export,
    backend: Arc<dyn Backend>,
    stats: Arc<Stats>,
    stopping: AtomicBool,
    /// A handle on each open connection, to shut it from outside.
    open: Mutex<HashMap<u64, Stream>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    next_id: AtomicU64,
}

impl Shared {
    fn open(&self) -> MutexGuard<'_, HashMap<u64, Stream>> {
        // The map only holds socket handles; it stays usable.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn workers(&self) -> MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    acceptors: Vec<JoinHandle<()>>,
    bound: Vec<String>,
    sockets: Vec<PathBuf>,
}

/// What [`Server::stop`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Connections still busy when the drain time ran out (shut hard).
    pub undrained: usize,
}

impl Server {
    /// Binds every listener and starts accepting.
    ///
    /// # Errors
    ///
    /// A sentence naming the listener that could not be bound, or the
    /// backend's geometry that breaks proto.md's rules.
    pub fn start(
        listen: &[Listen],
        name: String,
        description: String,
        backend: Arc<dyn Backend>,
    ) -> Result<Server, String> {
        let geometry = backend.geometry();
        geometry.validate()?;
        let listeners = listen
            .iter()
            .map(Listener::bind)
            .collect::<Result<Vec<_>, _>>()?;
        let shared = Arc::new(Shared {
            export: Export {
                name,
                description,
                geometry,
            },
            backend,
            stats: Arc::new(Stats::default()),
            stopping: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
            workers: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
        });
        let bound = listeners.iter().map(Listener::bound).collect();
        let sockets = listeners
            .iter()
            .filter_map(|l| match l {
                Listener::Unix(_, p) => Some(p.clone()),
                Listener::Tcp(_) => None,
            })
            .collect();
        let mut acceptors = Vec::new();
        for listener in listeners {
            listener
                .set_nonblocking()
                .map_err(|e| format!("{}: {e}", listener.bound()))?;
            let shared = Arc::clone(&shared);
            let t = thread::Builder::new()
                .name("nbd-accept".into())
                .spawn(move || accept_loop(&listener, &shared))
                .map_err(|e| format!("cannot start a listener thread: {e}"))?;
            acceptors.push(t);
        }
        Ok(Server {
            shared,
            acceptors,
            bound,
            sockets,
        })
    }

    /// The addresses listened on (`unix:PATH`, `tcp:IP:PORT`).
    pub fn bound(&self) -> &[String] {
        &self.bound
    }

    /// The counters now.
    pub fn stats(&self) -> Snapshot {
        self.shared.stats.snapshot()
    }

    /// Stops accepting, lets every connection finish the requests it has
    /// read (at most `drain`), then closes them all.
    pub fn stop(&mut self, drain: Duration) -> Stopped {
        {
            // Under the lock: a connection accepted from now on sees the
            // flag before it registers, one registered earlier is shut here.
            let open = self.shared.open();
            self.shared.stopping.store(true, Ordering::SeqCst);
            for stream in open.values() {
                stream.shutdown(Shutdown::Read);
            }
        }
        for t in std::mem::take(&mut self.acceptors) {
            let _ = t.join();
        }
        for path in &self.sockets {
            let _ = std::fs::remove_file(path);
        }
        let deadline = Instant::now() + drain;
        loop {
            let mut workers = self.shared.workers();
            workers.retain(|w| !w.is_finished());
            if workers.is_empty() {
                return Stopped { undrained: 0 };
            }
            if Instant::now() >= deadline {
                let undrained = workers.len();
                for stream in self.shared.open().values() {
                    stream.shutdown(Shutdown::Both);
                }
                tracing::warn!(
                    undrained,
                    "connections still busy after the drain time; shut"
                );
                return Stopped { undrained };
            }
            drop(workers);
            thread::sleep(Duration::from_millis(5));
        }
    }
}

fn accept_loop(listener: &Listener, shared: &Arc<Shared>) {
    while !shared.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok(stream) => start_connection(stream, shared),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            Err(e) => {
                // Out of descriptors, or the client reset before accept:
                // try again shortly.
                tracing::warn!(listener = %listener.bound(), error = %e, "accept failed");
                thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

fn start_connection(stream: Stream, shared: &Arc<Shared>) {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    {
        let mut open = shared.open();
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        match stream.try_clone() {
            Ok(handle) => {
                open.insert(id, handle);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot keep a handle on a new connection; dropped");
                return;
            }
        }
    }
    shared.stats.connection_opened();
    let worker = {
        let shared = Arc::clone(shared);
        thread::Builder::new()
            .name(format!("nbd-conn-{id}"))
            .spawn(move || {
                connection(id, stream, &shared);
                shared.open().remove(&id);
                shared.stats.connection_closed();
            })
    };
    match worker {
        Ok(w) => {
            let mut workers = shared.workers();
            workers.retain(|w| !w.is_finished());
            workers.push(w);
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot start a connection thread; dropped");
            shared.open().remove(&id);
            shared.stats.connection_closed();
        }
    }
}

/// One client from its greeting to its close.
fn connection(id: u64, stream: Stream, shared: &Shared) {
    let reader = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(conn = id, error = %e, "cannot clone the socket");
            return;
        }
    };
    let mut writer = stream;
    let mut reader = BufReader::with_capacity(READ_BUFFER, reader);
    let _ = reader.get_ref().set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let outcome = handshake::negotiate(&mut reader, &mut writer, &shared.export);
    match outcome {
        Ok(Outcome::Transmission) => {}
        Ok(Outcome::ClientEnded) => {
            tracing::debug!(conn = id, "client ended the handshake");
            return;
        }
        Ok(Outcome::Closed(reason, detail)) => {
            closed(id, shared, reason, &detail);
            writer.shutdown(Shutdown::Both);
            return;
        }
        Err(e) => {
            tracing::debug!(conn = id, error = %e, "handshake failed");
            return;
        }
    }
    if let Err(e) = reader.get_ref().set_read_timeout(None) {
        tracing::warn!(conn = id, error = %e, "cannot clear the handshake timeout");
        return;
    }
    tracing::debug!(conn = id, "transmission phase");
    let end = transmission::serve(
        reader,
        writer,
        &shared.backend,
        shared.export.geometry,
        &shared.stats,
    );
    match end {
        End::Disconnect | End::Eof => tracing::debug!(conn = id, end = ?end, "client done"),
        End::Closed(reason, detail) => closed(id, shared, reason, &detail),
        End::Broken(detail) => tracing::info!(conn = id, %detail, "connection broken"),
    }
}

fn closed(id: u64, shared: &Shared, reason: CloseReason, detail: &str) {
    shared.stats.closed(reason);
    tracing::warn!(
        conn = id,
        reason = reason.name(),
        %detail,
        "closing the connection on a protocol violation"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_parse() {
        assert_eq!(
            "unix:/tmp/x.sock".parse::<Listen>(),
            Ok(Listen::Unix("/tmp/x.sock".into()))
        );
        assert_eq!(
            "tcp:127.0.0.1:10809".parse::<Listen>(),
            Ok(Listen::Tcp("127.0.0.1:10809".into()))
        );
        assert_eq!(
            "tcp:[::1]:0".parse::<Listen>(),
            Ok(Listen::Tcp("[::1]:0".into()))
        );
        for bad in [
            "unix:",
            "tcp:127.0.0.1",
            "tcp::80",
            "tcp:h:99999",
            "/tmp/x",
            "",
        ] {
            assert!(bad.parse::<Listen>().is_err(), "{bad}");
        }
        assert_eq!(Listen::Tcp("h:1".into()).to_string(), "tcp:h:1");
    }
}
