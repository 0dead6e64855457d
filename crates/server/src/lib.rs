//! `server`: tlsscope's built-in TLS/HTTP target.
//!
//! Non-blocking sockets, one epoll loop per worker thread (each with its own `SO_REUSEPORT`
//! listener when there are several), explicit `SSL_do_handshake` so uprobes see every handshake,
//! and counters of what it saw: handshakes by kind, failures by reason, requests and bytes.
//!
//! Hostile clients meet [`Limits`]: deadlines for the handshake, the request head and idle or
//! stalled connections, a cap on open connections, bounded buffers, and a fair share of the
//! worker per turn. What each defence did is counted in [`StatsSnapshot`].

mod conn;
pub mod http;
pub mod stats;
mod worker;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

pub use stats::{ServerCounters, StatsSnapshot};

/// How to listen and how many workers to run.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Default 127.0.0.1:4433. Port 0 picks a free port; see [`Server::local_addr`].
    pub listen: SocketAddr,
    /// Worker threads, each with its own event loop.
    pub threads: usize,
    /// CPUs to pin workers to, round robin; empty leaves them to the scheduler.
    pub cpus: Vec<usize>,
    /// What a client may take before the server closes its connection.
    pub limits: Limits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 4433)),
            threads: 1,
            cpus: Vec::new(),
            limits: Limits::default(),
        }
    }
}

/// Deadlines and a connection cap that keep slow, silent or flooding clients from holding the
/// server's connections and memory. A connection past a deadline is closed and counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// From accept to a finished TLS handshake.
    pub handshake_timeout: Duration,
    /// From the first byte of a request head to its end. It is not renewed as bytes arrive,
    /// so a client sending its head a byte at a time is cut off all the same.
    pub request_timeout: Duration,
    /// The longest a connection may go without moving: a kept-alive connection waiting for
    /// its next request, a request body that stops arriving, a response the client stops
    /// reading.
    pub idle_timeout: Duration,
    /// Open connections over all workers, each worker taking an equal share. At the cap a
    /// new connection takes the place of the one that has waited longest for its client (an
    /// unfinished handshake, an idle kept-alive connection, an incomplete request head); with
    /// none of those, new connections wait in the listen backlog.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            handshake_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(60),
            max_connections: 4096,
        }
    }
}

impl Limits {
    /// One worker's limits when `workers` share these.
    fn share(&self, workers: usize) -> Limits {
        Limits {
            max_connections: self.max_connections.div_ceil(workers.max(1)).max(1),
            ..self.clone()
        }
    }
}

/// Errors starting or running the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: the address is already in use; pick another or stop the program using it")]
    AddrInUse { addr: SocketAddr },
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("cannot pin worker {worker} to CPU {cpu}: {source}")]
    Pin {
        worker: usize,
        cpu: usize,
        source: io::Error,
    },
    #[error("worker {worker} failed: {source}")]
    Worker { worker: usize, source: io::Error },
}

/// A bound server, ready to [`run`](Server::run).
pub struct Server {
    listeners: Vec<std::net::TcpListener>,
    local_addr: SocketAddr,
    ctx: ossl::Context,
    config: ServerConfig,
    counters: Arc<ServerCounters>,
    shutdown: Arc<AtomicBool>,
}

impl Server {
    /// Binds the listening sockets (one per worker). Fails here, before any thread starts, when
    /// the address is taken.
    pub fn bind(config: ServerConfig, ctx: ossl::Context) -> Result<Server, Error> {
        let threads = config.threads.max(1);
        let shared_port = threads > 1;
        let mut listeners = Vec::with_capacity(threads);
        // Check the port is free before the first listener only: the others join it.
        let first = listen(config.listen, shared_port, shared_port)?;
        let local_addr = first.local_addr().map_err(|source| Error::Listen {
            addr: config.listen,
            source,
        })?;
        listeners.push(first);
        for _ in 1..threads {
            listeners.push(listen(local_addr, true, false)?);
        }
        let lib = ctx.library();
        let (library, flavour) = (lib.name().to_string(), lib.flavour().name().to_string());
        Ok(Server {
            counters: Arc::new(ServerCounters::new(threads, library, flavour)),
            shutdown: Arc::new(AtomicBool::new(false)),
            listeners,
            local_addr,
            ctx,
            config,
        })
    }

    /// The address actually bound (the port is known even when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Set it to stop the server: workers notice within 100 ms, close their connections and
    /// return.
    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.shutdown)
    }

    /// The live counters (a snapshot is also returned by `run`).
    pub fn counters(&self) -> Arc<ServerCounters> {
        Arc::clone(&self.counters)
    }

    /// Runs every worker until shutdown and returns the final counts.
    pub fn run(self) -> Result<StatsSnapshot, Error> {
        let workers = self.listeners.len();
        let mut handles = Vec::with_capacity(workers);
        for (index, listener) in self.listeners.into_iter().enumerate() {
            let cpu = (!self.config.cpus.is_empty())
                .then(|| self.config.cpus[index % self.config.cpus.len()]);
            let w = worker::Worker {
                index,
                listener: mio::net::TcpListener::from_std(listener),
                ctx: self.ctx.clone(),
                counters: Arc::clone(&self.counters),
                shutdown: Arc::clone(&self.shutdown),
                limits: self.config.limits.share(workers),
            };
            let handle = std::thread::Builder::new()
                .name(format!("tlsscope-serve-{index}"))
                .spawn(move || -> Result<(), Error> {
                    if let Some(cpu) = cpu {
                        host::pin_current_thread(cpu).map_err(|source| Error::Pin {
                            worker: index,
                            cpu,
                            source,
                        })?;
                    }
                    w.run().map_err(|source| Error::Worker {
                        worker: index,
                        source,
                    })
                })
                .map_err(|source| Error::Worker {
                    worker: index,
                    source,
                })?;
            handles.push(handle);
        }
        let mut first_error = None;
        for handle in handles {
            let result = handle.join().unwrap_or_else(|_| {
                Err(Error::Worker {
                    worker: usize::MAX,
                    source: io::Error::other("worker thread panicked"),
                })
            });
            if let Err(e) = result {
                // A failed worker must not leave the others running.
                self.shutdown
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(self.counters.snapshot()),
        }
    }
}

/// Binds and listens. With `reuse_port`, the socket can share its port with the server's other
/// workers; `check_free` first makes sure nobody else listens there.
fn listen(
    addr: SocketAddr,
    reuse_port: bool,
    check_free: bool,
) -> Result<std::net::TcpListener, Error> {
    let err = |source: io::Error| {
        if source.kind() == io::ErrorKind::AddrInUse {
            Error::AddrInUse { addr }
        } else {
            Error::Listen { addr, source }
        }
    };
    if check_free && addr.port() != 0 {
        // SO_REUSEPORT would let us silently share a port with another reuse-port listener of
        // the same user: check first that nobody listens there.
        drop(plain_bind(addr).map_err(err)?);
    }
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(err)?;
    socket.set_reuse_address(true).map_err(err)?;
    if reuse_port {
        socket.set_reuse_port(true).map_err(err)?;
    }
    socket.set_nonblocking(true).map_err(err)?;
    socket.bind(&addr.into()).map_err(err)?;
    socket.listen(1024).map_err(err)?;
    Ok(socket.into())
}

fn plain_bind(addr: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1)?;
    Ok(socket)
}
