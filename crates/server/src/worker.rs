//! One worker thread: its own epoll instance, its listener, and the connections it accepted.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use ossl::{Context, Ssl};

use crate::conn::{Conn, Verdict, WorkerShared};
use crate::http::{CannedIndex, MAX_HEAD_BYTES};
use crate::stats::{ServerCounters, WorkerCounters};

const LISTENER: Token = Token(usize::MAX);

/// How often an idle worker looks at the shutdown flag.
const SHUTDOWN_CHECK: Duration = Duration::from_millis(100);

/// Connections by token, reusing freed slots.
struct Slab {
    slots: Vec<Option<Conn>>,
    free: Vec<usize>,
}

impl Slab {
    /// The slot the next `insert` will use.
    fn next_key(&self) -> usize {
        self.free.last().copied().unwrap_or(self.slots.len())
    }

    fn insert(&mut self, conn: Conn) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(conn);
                i
            }
            None => {
                self.slots.push(Some(conn));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, i: usize) -> Option<Conn> {
        let conn = self.slots.get_mut(i)?.take();
        if conn.is_some() {
            self.free.push(i);
        }
        conn
    }
}

/// Everything a worker needs to run.
pub struct Worker {
    pub index: usize,
    pub listener: TcpListener,
    pub ctx: Context,
    pub counters: std::sync::Arc<ServerCounters>,
    pub shutdown: std::sync::Arc<AtomicBool>,
}

impl Worker {
    /// Serves until the shutdown flag is set; then closes every connection.
    pub fn run(mut self) -> io::Result<()> {
        let mut poll = Poll::new()?;
        poll.registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)?;
        let mut events = Events::with_capacity(1024);
        let mut conns = Slab {
            slots: Vec::new(),
            free: Vec::new(),
        };
        let mut buffers: Vec<Box<[u8]>> = Vec::new();
        let index_page = CannedIndex::new();
        let all_counters = std::sync::Arc::clone(&self.counters);
        let counters = &all_counters.workers[self.index];
        let shared = WorkerShared {
            counters,
            all_counters: &all_counters,
            index: &index_page,
        };
        while !self.shutdown.load(Ordering::Relaxed) {
            match poll.poll(&mut events, Some(SHUTDOWN_CHECK)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                if event.token() == LISTENER {
                    self.accept_all(&poll, &mut conns, &mut buffers, counters);
                    continue;
                }
                let i = event.token().0;
                let verdict = match conns.slots.get_mut(i) {
                    Some(Some(conn)) => conn.drive(&shared),
                    _ => continue,
                };
                if verdict == Verdict::Close {
                    close(&poll, &mut conns, i, &mut buffers, counters);
                }
            }
        }
        for i in 0..conns.slots.len() {
            close(&poll, &mut conns, i, &mut buffers, counters);
        }
        Ok(())
    }

    fn accept_all(
        &mut self,
        poll: &Poll,
        conns: &mut Slab,
        buffers: &mut Vec<Box<[u8]>>,
        counters: &WorkerCounters,
    ) {
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Out of fds or a connection reset before accept: keep serving the others.
                Err(_) => return,
            };
            WorkerCounters::one(&counters.connections_accepted);
            let _ = stream.set_nodelay(true);
            let ssl = match Ssl::new(&self.ctx) {
                Ok(ssl) => ssl,
                Err(e) => {
                    counters.handshake_failed(&e.to_string());
                    continue;
                }
            };
            let buf = buffers
                .pop()
                .unwrap_or_else(|| vec![0u8; MAX_HEAD_BYTES].into_boxed_slice());
            let mut conn = match Conn::new(stream, ssl, buf) {
                Ok(conn) => conn,
                Err(e) => {
                    counters.handshake_failed(&e.to_string());
                    continue;
                }
            };
            let i = conns.next_key();
            let registered = poll.registry().register(
                conn.stream_mut(),
                Token(i),
                Interest::READABLE | Interest::WRITABLE,
            );
            if registered.is_err() {
                WorkerCounters::one(&counters.connection_errors);
                buffers.push(conn.finish());
                continue;
            }
            let inserted = conns.insert(conn);
            debug_assert_eq!(inserted, i);
        }
    }
}

fn close(
    poll: &Poll,
    conns: &mut Slab,
    i: usize,
    buffers: &mut Vec<Box<[u8]>>,
    counters: &WorkerCounters,
) {
    if let Some(mut conn) = conns.remove(i) {
        let _ = poll.registry().deregister(conn.stream_mut());
        WorkerCounters::one(&counters.connections_closed);
        buffers.push(conn.finish());
    }
}
