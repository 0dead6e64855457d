//! One worker thread: its own epoll instance, its listener, and the connections it accepted.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use ossl::{Context, Ssl};

use crate::conn::{Clock, Conn, Verdict, WorkerShared};
use crate::http::{CannedIndex, MAX_HEAD_BYTES};
use crate::stats::{HandshakeFailure, ServerCounters, WorkerCounters};
use crate::Limits;

const LISTENER: Token = Token(usize::MAX);
/// Set in the token of a connection's async wait fd (the rest is the connection's slot).
const ASYNC_FD: usize = 1 << (usize::BITS - 2);

/// How often a worker closes the connections past their deadline and looks at the shutdown
/// flag: the precision of every timeout.
const SWEEP_INTERVAL: Duration = Duration::from_millis(100);

/// Connections accepted in one go before the worker serves the ones it has.
const ACCEPT_BATCH: usize = 64;

/// Input buffers kept for new connections; beyond these, a closed connection's buffer is
/// freed, so memory goes back down after a flood of connections.
const SPARE_BUFFERS: usize = 64;

/// Connections by token, reusing freed slots.
struct Slab {
    slots: Vec<Option<Conn>>,
    free: Vec<usize>,
    open: usize,
}

impl Slab {
    /// The slot the next `insert` will use.
    fn next_key(&self) -> usize {
        self.free.last().copied().unwrap_or(self.slots.len())
    }

    fn insert(&mut self, conn: Conn) -> usize {
        self.open += 1;
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
            self.open -= 1;
        }
        conn
    }
}

/// Whether the listener may still hold connections the worker has not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Accepting {
    /// Everything pending was taken: wait for the listener's next event.
    Drained,
    /// A batch was taken and more may wait: take the next one after serving a turn.
    More,
    /// At the connection limit with nobody to shed, or out of file descriptors: leave new
    /// connections in the backlog until a connection closes or the next sweep.
    Paused,
}

/// The shed candidates, longest waiter last, as (waiting since, slot, serial). Built by one
/// scan when a connection has to be shed and the list is empty, then used up one by one
/// (entries whose connection moved on are skipped), so a flood at the limit costs a scan per
/// few hundred connections shed rather than one per connection.
#[derive(Default)]
struct ShedQueue {
    entries: Vec<(Instant, usize, u64)>,
}

/// A worker's connections and the state of its loop.
struct State {
    poll: Poll,
    conns: Slab,
    buffers: Vec<Box<[u8]>>,
    /// Connections to drive again without an event (they yielded), and the next turn's list.
    ready: Vec<usize>,
    ready_next: Vec<usize>,
    accepting: Accepting,
    shed_queue: ShedQueue,
    accepts: u64,
}

/// Everything a worker needs to run.
pub struct Worker {
    pub index: usize,
    pub listener: TcpListener,
    pub ctx: Context,
    pub counters: Arc<ServerCounters>,
    pub shutdown: Arc<AtomicBool>,
    /// This worker's limits: `max_connections` is its share of the server's.
    pub limits: Limits,
}

impl Worker {
    /// Serves until the shutdown flag is set; then closes every connection.
    pub fn run(mut self) -> io::Result<()> {
        block_sigpipe()?;
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)?;
        let mut events = Events::with_capacity(1024);
        let mut st = State {
            poll,
            conns: Slab {
                slots: Vec::new(),
                free: Vec::new(),
                open: 0,
            },
            buffers: Vec::new(),
            ready: Vec::new(),
            ready_next: Vec::new(),
            accepting: Accepting::Drained,
            shed_queue: ShedQueue::default(),
            accepts: 0,
        };
        let index_page = CannedIndex::new();
        let all_counters = Arc::clone(&self.counters);
        let mut shared = WorkerShared {
            counters: &all_counters.workers[self.index],
            all_counters: &all_counters,
            index: &index_page,
            clock: Clock::new(Instant::now(), &self.limits),
        };
        let mut next_sweep = shared.clock.now + SWEEP_INTERVAL;
        while !self.shutdown.load(Ordering::Relaxed) {
            // Connections that used up their turn wait in `ready_next` (no event will come for
            // them: epoll is edge-triggered).
            let busy = !st.ready_next.is_empty() || st.accepting == Accepting::More;
            let timeout = if busy {
                Duration::ZERO
            } else {
                next_sweep.saturating_duration_since(shared.clock.now)
            };
            match st.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            shared.clock = Clock::new(Instant::now(), &self.limits);
            for event in events.iter() {
                if event.token() == LISTENER {
                    self.accept_some(&mut st, &shared);
                } else {
                    // A socket, or an async job's wait fd: either way the connection goes on.
                    st.drive(event.token().0 & !ASYNC_FD, &shared);
                }
            }
            st.drive_ready(&shared);
            let sweep = shared.clock.now >= next_sweep;
            if sweep {
                st.close_expired(&shared);
                next_sweep = shared.clock.now + SWEEP_INTERVAL;
            }
            if self.should_retry_accept(&st, sweep) {
                self.accept_some(&mut st, &shared);
            }
        }
        for i in 0..st.conns.slots.len() {
            st.close(i, shared.counters);
        }
        Ok(())
    }

    /// Accepting again without a listener event: the last batch was cut short, or accepting
    /// was paused and there may be room now.
    fn should_retry_accept(&self, st: &State, sweep: bool) -> bool {
        match st.accepting {
            Accepting::Drained => false,
            Accepting::More => true,
            Accepting::Paused => sweep || st.conns.open < self.limits.max_connections,
        }
    }

    /// Takes up to a batch of pending connections, shedding a waiting one for each new one
    /// once at the limit.
    fn accept_some(&self, st: &mut State, w: &WorkerShared<'_>) {
        for _ in 0..ACCEPT_BATCH {
            // At the limit, a waiter makes room, but only for a connection that is there: shed
            // before the accept, a WouldBlock would have closed it for nothing.
            let waiter = if st.conns.open >= self.limits.max_connections {
                let Some(i) = st.oldest_waiter() else {
                    st.pause_accepting(w.counters);
                    return;
                };
                Some(i)
            } else {
                None
            };
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    st.accepting = Accepting::Drained;
                    return;
                }
                Err(e) if out_of_resources(&e) => {
                    st.pause_accepting(w.counters);
                    return;
                }
                // Interrupted, or a connection reset before it was taken: take the next.
                Err(_) => continue,
            };
            if let Some(i) = waiter {
                st.shed(i, w);
            }
            WorkerCounters::one(&w.counters.connections_accepted);
            self.admit(st, stream, w);
        }
        st.accepting = Accepting::More;
    }

    /// Sets up a new connection's TLS and registers it.
    fn admit(&self, st: &mut State, stream: TcpStream, w: &WorkerShared<'_>) {
        let counters = w.counters;
        let _ = stream.set_nodelay(true);
        let ssl = match Ssl::new(&self.ctx) {
            Ok(ssl) => ssl,
            Err(e) => {
                counters.handshake_failed(HandshakeFailure::Other, &e.to_string());
                WorkerCounters::one(&counters.connections_closed);
                return;
            }
        };
        let buf = st
            .buffers
            .pop()
            .unwrap_or_else(|| vec![0u8; MAX_HEAD_BYTES].into_boxed_slice());
        st.accepts += 1;
        let mut conn = match Conn::new(stream, ssl, buf, st.accepts, &w.clock) {
            Ok(conn) => conn,
            Err(e) => {
                counters.handshake_failed(HandshakeFailure::Other, &e.to_string());
                WorkerCounters::one(&counters.connections_closed);
                return;
            }
        };
        let i = st.conns.next_key();
        let registered = st.poll.registry().register(
            conn.stream_mut(),
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        );
        if registered.is_err() {
            WorkerCounters::one(&counters.connection_errors);
            WorkerCounters::one(&counters.connections_closed);
            st.recycle(conn.finish(counters));
            return;
        }
        let inserted = st.conns.insert(conn);
        debug_assert_eq!(inserted, i);
    }
}

impl State {
    /// Drives connection `i` after an event or a yield, and acts on the verdict.
    fn drive(&mut self, i: usize, w: &WorkerShared<'_>) {
        let Some(Some(conn)) = self.conns.slots.get_mut(i) else {
            return;
        };
        match conn.drive(w) {
            Verdict::Keep => {}
            Verdict::Yield => {
                if !conn.queued {
                    conn.queued = true;
                    self.ready_next.push(i);
                }
            }
            Verdict::Close => self.close(i, w.counters),
            Verdict::Async => self.watch_async(i, w.counters),
        }
    }

    /// Watches the wait fds of connection `i`'s paused async job: readable when the job can
    /// go on. An fd that cannot be watched fails the connection (nothing would wake it).
    fn watch_async(&mut self, i: usize, counters: &WorkerCounters) {
        let Some(Some(conn)) = self.conns.slots.get_mut(i) else {
            return;
        };
        let (added, removed) = conn.async_fds_changed();
        let registry = self.poll.registry();
        for fd in removed {
            let _ = registry.deregister(&mut SourceFd(&fd));
        }
        for fd in added {
            let watched =
                registry.register(&mut SourceFd(&fd), Token(ASYNC_FD | i), Interest::READABLE);
            if watched.is_err() {
                WorkerCounters::one(&counters.connection_errors);
                self.close(i, counters);
                return;
            }
        }
    }

    /// Gives every connection that yielded in the previous turn its next turn.
    fn drive_ready(&mut self, w: &WorkerShared<'_>) {
        std::mem::swap(&mut self.ready, &mut self.ready_next);
        let mut ready = std::mem::take(&mut self.ready);
        for &i in &ready {
            // A slot closed and reused since it was queued holds a connection not queued.
            match self.conns.slots.get_mut(i) {
                Some(Some(conn)) if conn.queued => conn.queued = false,
                _ => continue,
            }
            self.drive(i, w);
        }
        ready.clear();
        self.ready = ready;
    }

    /// Closes every connection whose deadline has passed, counting which deadline it was.
    fn close_expired(&mut self, w: &WorkerShared<'_>) {
        for i in 0..self.conns.slots.len() {
            match &self.conns.slots[i] {
                Some(conn) if conn.deadline() <= w.clock.now => conn.count_timeout(w.counters),
                _ => continue,
            }
            self.close(i, w.counters);
        }
    }

    /// The connection that has waited longest of those that may be shed, left open; the
    /// queue's stale entries (closed, reused or moved on since) are dropped on the way.
    fn oldest_waiter(&mut self) -> Option<usize> {
        if self.shed_queue.entries.is_empty() {
            self.fill_shed_queue();
        }
        while let Some(&(since, i, serial)) = self.shed_queue.entries.last() {
            let still_waiting = matches!(
                &self.conns.slots[i],
                Some(c) if c.serial() == serial && c.since() == since && c.stage().sheddable()
            );
            if still_waiting {
                return Some(i);
            }
            self.shed_queue.entries.pop();
        }
        None
    }

    /// Closes connection `i`, the longest waiter (`oldest_waiter`), counted as shed.
    fn shed(&mut self, i: usize, w: &WorkerShared<'_>) {
        self.shed_queue.entries.pop();
        if let Some(conn) = &self.conns.slots[i] {
            conn.count_shed(w.counters);
        }
        self.close(i, w.counters);
    }

    fn fill_shed_queue(&mut self) {
        let entries = &mut self.shed_queue.entries;
        for (i, slot) in self.conns.slots.iter().enumerate() {
            if let Some(c) = slot {
                if c.stage().sheddable() {
                    entries.push((c.since(), i, c.serial()));
                }
            }
        }
        // Longest waiter last, where `pop` takes it.
        entries.sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
    }

    fn pause_accepting(&mut self, counters: &WorkerCounters) {
        if self.accepting != Accepting::Paused {
            WorkerCounters::one(&counters.accept_pauses);
        }
        self.accepting = Accepting::Paused;
    }

    fn close(&mut self, i: usize, counters: &WorkerCounters) {
        if let Some(mut conn) = self.conns.remove(i) {
            let _ = self.poll.registry().deregister(conn.stream_mut());
            for fd in conn.take_async_fds() {
                let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
            }
            WorkerCounters::one(&counters.connections_closed);
            let buf = conn.finish(counters);
            self.recycle(buf);
        }
    }

    /// Keeps a closed connection's input buffer for the next one, up to a few spares.
    fn recycle(&mut self, buf: Box<[u8]>) {
        if self.buffers.len() < SPARE_BUFFERS {
            self.buffers.push(buf);
        }
    }
}

/// Accept errors that mean "not now" for every pending connection, not just one.
fn out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Blocks SIGPIPE in this thread. Writing to a connection its client has reset then fails
/// with EPIPE, which the connection handles like any lost peer, instead of raising a signal
/// whose default action ends the process. (Rust programs start with SIGPIPE ignored; this
/// keeps a worker safe in a process that put the default back.) A SIGPIPE raised in this
/// thread stays pending, undelivered, and goes away with the thread.
fn block_sigpipe() -> io::Result<()> {
    // SAFETY: sigemptyset initializes the set before sigaddset and pthread_sigmask read it;
    // a null old-set pointer is allowed; only this thread's mask changes.
    let rc = unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}
