//! One load thread: its own epoll loop and its share of the connection slots.
//!
//! A slot holds at most one connection. In full and resume mode an operation is a whole
//! connection (connect, handshake, optional request, close); in keepalive mode a slot keeps its
//! connection and an operation is one request on it.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use ossl::HandshakeKind;
use socket2::{Domain, Protocol, Socket, Type};

use crate::engine::{Client, Io, SlotSession, Tls};
use crate::http::ResponseParser;
use crate::pacer::Pacer;
use crate::record::Recorder;
use crate::result::ConnectionRow;
use crate::{LoadConfig, Mode, ResumeBy, Shared};

/// How long a TLS 1.3 resumption run waits after the handshake for the server's ticket.
const TICKET_WAIT: Duration = Duration::from_millis(200);
/// How often timeouts are checked.
const SWEEP: Duration = Duration::from_millis(50);
/// After the deadline, how long operations in flight may take to finish (unrecorded), so the
/// server does not see handshakes abandoned half-way.
const DRAIN: Duration = Duration::from_secs(2);
/// Bits of an epoll token that hold the slot index; the rest hold the slot's generation.
const SLOT_BITS: u32 = 24;

/// The pacing timer's token (never a slot's: the slot bits are all ones).
const PACER: Token = Token(usize::MAX);

fn token(slot: usize, generation: u32) -> Token {
    Token(((generation as usize) << SLOT_BITS) | slot)
}

fn slot_of(token: Token) -> (usize, u32) {
    (
        token.0 & ((1 << SLOT_BITS) - 1),
        (token.0 >> SLOT_BITS) as u32,
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Connecting,
    Handshaking,
    /// TLS 1.3, resume mode: reading until the NewSessionTicket arrives.
    AwaitTicket,
    SendRequest,
    ReadResponse,
    /// Keepalive: connected, no request in flight.
    Idle,
}

/// One connection and the timing of what it is doing.
struct Conn {
    // Dropped before `stream`: an OpenSSL connection uses its fd.
    tls: Tls,
    stream: TcpStream,
    phase: Phase,
    /// When the connection's socket was created.
    opened: Instant,
    connected: Option<Instant>,
    handshake_done: Option<Instant>,
    offered_session: bool,
    handshake: Option<ossl::HandshakeIds>,
    requests: u32,
    sent: usize,
    request_started: Option<Instant>,
    first_byte: Option<Instant>,
    parser: ResponseParser,
    /// When the current phase gives up.
    deadline: Instant,
    /// Whether the connection's own figures (connect, handshake) count.
    measured: bool,
}

/// The operation a slot is running.
#[derive(Clone, Copy, Debug)]
struct Op {
    planned: Instant,
    started: Instant,
    measured: bool,
    /// Open loop: how late the load thread woke for this planned start. Recorded with the
    /// operation's other figures when it completes, so every phase counts the same operations.
    pacer_late: Option<Duration>,
}

struct Slot {
    /// Bumped for every new connection; the epoll token carries it, so an event left over from
    /// the slot's previous socket is recognised and ignored.
    generation: u32,
    conn: Option<Conn>,
    op: Option<Op>,
    /// The session the slot may offer, kept by its engine.
    session: SlotSession,
    /// The slot's next handshake is not its first (resume mode expects it to resume).
    had_first: bool,
}

/// What happened to an operation.
enum Step {
    /// Waiting for the socket.
    Wait,
    /// Keep driving the state machine.
    Continue,
    /// The operation finished; the connection stays open (keepalive) or was closed.
    OpDone,
    /// The operation or connection failed, with an error kind.
    Failed(String),
}

pub struct Worker<'a> {
    pub index: usize,
    pub cfg: &'a LoadConfig,
    pub shared: &'a Shared,
    pub client: Client<'a>,
    pub request: &'a [u8],
    pub slots: usize,
}

impl Worker<'_> {
    /// Runs until the shared deadline, the operation count, or a stop request.
    pub fn run(self) -> io::Result<Recorder> {
        let mut state = State::new(&self)?;
        state.run();
        Ok(state.rec)
    }
}

struct State<'a> {
    w: &'a Worker<'a>,
    poll: Poll,
    slots: Vec<Slot>,
    rec: Recorder,
    rbuf: Box<[u8]>,
    /// Open loop: the next planned start, and planned starts waiting for a free slot.
    interval: Option<Duration>,
    next_planned: Instant,
    backlog: VecDeque<(Instant, Duration)>,
    resume_credit: f64,
    next_source: usize,
    /// The kernel ran out of local ports once: connect from the source addresses from now on.
    spreading: bool,
    no_more_ops: bool,
    cpu_at_measure_start: Option<f64>,
    /// Slots whose operation failed: restarted at the next sweep, so a target that refuses
    /// at once cannot make the loop recurse or spin.
    retry: Vec<usize>,
    /// Past the deadline: finishing what is in flight, recording nothing.
    draining: bool,
    /// Open loop: wakes the loop at the next planned start (see `crate::timer`).
    pacer: Option<Pacer>,
}

impl<'a> State<'a> {
    fn new(w: &'a Worker<'a>) -> io::Result<State<'a>> {
        let threads = w.cfg.threads.max(1) as f64;
        let interval = w
            .cfg
            .rate
            .map(|r| Duration::from_secs_f64(threads / r.max(1e-9)));
        // Spread the threads' schedules over one interval.
        let offset = interval.map_or(Duration::ZERO, |i| i.mul_f64(w.index as f64 / threads));
        let poll = Poll::new()?;
        let pacer = match interval {
            Some(_) => Some(Pacer::new(poll.registry(), PACER)?),
            None => None,
        };
        Ok(State {
            w,
            poll,
            slots: (0..w.slots)
                .map(|_| Slot {
                    generation: 0,
                    conn: None,
                    op: None,
                    session: SlotSession::new(w.client, matches!(w.cfg.mode, Mode::Resume { .. })),
                    had_first: false,
                })
                .collect(),
            rec: Recorder::default(),
            rbuf: vec![0u8; 16 * 1024].into_boxed_slice(),
            interval,
            next_planned: w.shared.start + w.cfg.schedule_offset + offset,
            backlog: VecDeque::new(),
            resume_credit: 0.0,
            next_source: w.index,
            spreading: false,
            no_more_ops: false,
            cpu_at_measure_start: None,
            retry: Vec::new(),
            draining: false,
            pacer,
        })
    }

    fn cfg(&self) -> &LoadConfig {
        self.w.cfg
    }

    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut last_sweep = Instant::now();
        for i in 0..self.slots.len() {
            self.start_next(i, Instant::now());
        }
        loop {
            let now = Instant::now();
            self.note_measure_start(now);
            if self.w.shared.stop.load(Relaxed) {
                break;
            }
            if now >= self.w.shared.deadline {
                if !self.draining {
                    self.draining = true;
                    self.no_more_ops = true;
                    self.note_measure_end();
                }
                let grace = DRAIN.min(self.w.cfg.timeout);
                if self.finished() || now >= self.w.shared.deadline + grace {
                    break;
                }
            }
            self.schedule(now);
            if self.finished() {
                break;
            }
            let timeout = self.poll_timeout(now);
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                self.rec.error(&format!("poll: {e}"));
                break;
            }
            for event in events.iter() {
                if event.token() == PACER {
                    if let Some(p) = &mut self.pacer {
                        p.woke(Instant::now());
                    }
                    continue;
                }
                let (i, generation) = slot_of(event.token());
                if self
                    .slots
                    .get(i)
                    .is_some_and(|s| s.generation == generation)
                {
                    self.drive(i);
                }
            }
            let now = Instant::now();
            if now.duration_since(last_sweep) >= SWEEP {
                last_sweep = now;
                self.sweep_timeouts(now);
                for i in std::mem::take(&mut self.retry) {
                    self.start_next(i, now);
                }
            }
        }
        if !self.draining {
            self.note_measure_end();
        }
        // Idle keep-alive connections end as a client ends them, with close_notify (the server
        // would otherwise count an abrupt close); whatever else is still open closes here, its
        // unfinished operation not recorded.
        for i in 0..self.slots.len() {
            let idle = self.slots[i].op.is_none()
                && self.slots[i]
                    .conn
                    .as_ref()
                    .is_some_and(|c| c.phase == Phase::Idle);
            if idle {
                self.close(i, None);
            }
        }
        self.slots.clear();
    }

    fn note_measure_start(&mut self, now: Instant) {
        if self.cpu_at_measure_start.is_none() && now >= self.w.shared.measure_start {
            self.cpu_at_measure_start = Some(host::thread_cpu_s());
        }
    }

    fn note_measure_end(&mut self) {
        let start = self.cpu_at_measure_start.unwrap_or_else(host::thread_cpu_s);
        self.rec.thread_cpu_s = host::thread_cpu_s() - start;
        self.rec.window_s = Instant::now()
            .saturating_duration_since(self.w.shared.measure_start)
            .as_secs_f64();
    }

    /// True while what completes still counts (not draining after the deadline).
    fn recording(&self) -> bool {
        !self.draining
    }

    /// True when a count-bounded run has nothing left in flight.
    fn finished(&self) -> bool {
        self.no_more_ops && self.slots.iter().all(|s| s.op.is_none())
    }

    /// How long the loop may wait for events; a paced loop also arms its timer for the next
    /// planned start, which wakes it with sub-millisecond precision.
    fn poll_timeout(&mut self, now: Instant) -> Duration {
        let mut t = SWEEP;
        if let (Some(_), false) = (self.interval, self.no_more_ops) {
            let until = self.next_planned.saturating_duration_since(now);
            let planned = self.next_planned;
            match self.pacer.as_mut().map(|p| p.wait(now, planned)) {
                Some(Ok(wait)) => t = t.min(wait),
                Some(Err(e)) => {
                    self.rec.error(&format!("pacing timer: {e}"));
                    self.pacer = None;
                    t = t.min(until);
                }
                None => t = t.min(until),
            }
        }
        if !self.draining {
            t = t.min(self.w.shared.deadline.saturating_duration_since(now));
        }
        t
    }

    /// Open loop: queue every planned start that is due, and give queued starts to free slots.
    fn schedule(&mut self, now: Instant) {
        let Some(interval) = self.interval else {
            return;
        };
        while !self.no_more_ops && self.next_planned <= now {
            self.backlog
                .push_back((self.next_planned, now - self.next_planned));
            self.next_planned += interval;
        }
        while let Some(&(planned, late)) = self.backlog.front() {
            let free = (0..self.slots.len()).find(|&i| self.slot_can_start(i));
            let Some(i) = free else {
                break;
            };
            self.backlog.pop_front();
            if !self.start_op(i, planned, Some(late), now) {
                self.backlog.clear();
                break;
            }
        }
    }

    fn slot_can_start(&self, i: usize) -> bool {
        let slot = &self.slots[i];
        if slot.op.is_some() {
            return false;
        }
        match self.cfg().mode {
            Mode::KeepAlive => slot.conn.as_ref().is_some_and(|c| c.phase == Phase::Idle),
            _ => slot.conn.is_none(),
        }
    }

    /// Claims one operation from a count-bounded run. Operations started before the end of
    /// the warm-up are extra and not claimed.
    fn claim(&mut self, now: Instant) -> bool {
        if self.no_more_ops {
            return false;
        }
        let Some(limit) = self.cfg().count else {
            return true;
        };
        if now < self.w.shared.measure_start {
            return true;
        }
        if self.w.shared.claimed.fetch_add(1, Relaxed) < limit {
            return true;
        }
        self.no_more_ops = true;
        false
    }

    /// What a slot does next: a keepalive slot without a connection opens one (in either
    /// loop); in a closed loop the next operation starts now; in an open loop `schedule`
    /// starts operations.
    fn start_next(&mut self, i: usize, now: Instant) {
        if self.no_more_ops || self.w.shared.stop.load(Relaxed) {
            return;
        }
        let keepalive = self.cfg().mode == Mode::KeepAlive;
        if keepalive && self.slots[i].conn.is_none() {
            self.open_connection(i, now);
        } else if self.interval.is_none() {
            self.start_op(i, now, None, now);
        }
    }

    /// Starts an operation planned for `planned`; false when the run has no more to start.
    fn start_op(
        &mut self,
        i: usize,
        planned: Instant,
        pacer_late: Option<Duration>,
        now: Instant,
    ) -> bool {
        if !self.claim(now) {
            return false;
        }
        let measured = planned >= self.w.shared.measure_start;
        self.slots[i].op = Some(Op {
            planned,
            started: now,
            measured,
            pacer_late,
        });
        match self.cfg().mode {
            Mode::KeepAlive => {
                if let Some(conn) = self.slots[i].conn.as_mut() {
                    conn.phase = Phase::SendRequest;
                    conn.deadline = now + self.w.cfg.timeout;
                }
                self.drive(i);
            }
            _ => self.open_connection(i, now),
        }
        true
    }

    fn next_source_ip(&mut self) -> Option<IpAddr> {
        let ips = &self.w.cfg.source_ips;
        if ips.is_empty() {
            return None;
        }
        self.next_source = (self.next_source + 1) % ips.len();
        Some(ips[self.next_source])
    }

    /// Connects, letting the kernel pick the source until it has no local port left; from then
    /// on connections rotate over the configured source addresses (each with its own ports).
    fn connect_spread(&mut self, i: usize) -> io::Result<TcpStream> {
        let sources = self.w.cfg.source_ips.len();
        let mut source = if self.spreading {
            self.next_source_ip()
        } else {
            None
        };
        let mut attempts = 0;
        loop {
            let generation = self.slots[i].generation;
            let result = connect(self.cfg().target, source).and_then(|mut stream| {
                let interest = Interest::READABLE | Interest::WRITABLE;
                self.poll
                    .registry()
                    .register(&mut stream, token(i, generation), interest)?;
                Ok(stream)
            });
            match result {
                Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) && attempts < sources => {
                    self.spreading = true;
                    attempts += 1;
                    source = self.next_source_ip();
                }
                other => return other,
            }
        }
    }

    fn open_connection(&mut self, i: usize, now: Instant) {
        let measured = now >= self.w.shared.measure_start;
        let offer = self.should_offer(i);
        self.slots[i].generation = self.slots[i].generation.wrapping_add(1) & 0xff;
        let stream = match self.connect_spread(i) {
            Ok(s) => s,
            Err(e) => return self.fail(i, connect_error_kind(&e)),
        };
        let peer = crate::engine::Peer {
            server_name: self.cfg().server_name.as_deref(),
            verify_host: self.cfg().verify_host.as_deref(),
            ip: self.cfg().target.ip(),
        };
        let tls = match Tls::new(self.w.client, &self.slots[i].session, &stream, &peer, offer) {
            Ok(tls) => tls,
            Err(e) => return self.fail(i, format!("tls setup: {e}")),
        };
        self.slots[i].conn = Some(Conn {
            tls,
            stream,
            phase: Phase::Connecting,
            opened: now,
            connected: None,
            handshake_done: None,
            offered_session: offer,
            handshake: None,
            requests: 0,
            sent: 0,
            request_started: None,
            first_byte: None,
            parser: ResponseParser::new(),
            deadline: now + self.w.cfg.timeout,
            measured,
        });
    }

    /// Resume mode: offer the slot's session on this connection? `--resume-ratio` spreads the
    /// offers evenly.
    fn should_offer(&mut self, i: usize) -> bool {
        let Mode::Resume { ratio, .. } = self.cfg().mode else {
            return false;
        };
        if !self.slots[i].session.has_session() {
            return false;
        }
        self.resume_credit += ratio;
        if self.resume_credit >= 1.0 - 1e-9 {
            self.resume_credit -= 1.0;
            return true;
        }
        false
    }

    /// Drives slot `i` as far as its socket allows.
    fn drive(&mut self, i: usize) {
        loop {
            let step = self.step(i);
            match step {
                Step::Continue => continue,
                Step::Wait => return,
                Step::OpDone => {
                    self.op_done(i);
                    return;
                }
                Step::Failed(kind) => {
                    self.fail(i, kind);
                    return;
                }
            }
        }
    }

    fn step(&mut self, i: usize) -> Step {
        let mode = self.w.cfg.mode;
        let has_request = self.w.cfg.request.is_some();
        let Some(conn) = self.slots[i].conn.as_mut() else {
            return Step::Wait;
        };
        match conn.phase {
            // Only this socket's own events reach here (tokens carry the generation), and a
            // connecting socket reports nothing until the connection is made or has failed:
            // SO_ERROR says which.
            Phase::Connecting => match conn.stream.take_error() {
                Ok(Some(e)) | Err(e) => Step::Failed(connect_error_kind(&e)),
                Ok(None) => {
                    conn.connected = Some(Instant::now());
                    conn.phase = Phase::Handshaking;
                    Step::Continue
                }
            },
            Phase::Handshaking => match conn.tls.do_handshake(&mut conn.stream) {
                Io::Done(_) => {
                    let now = Instant::now();
                    conn.handshake_done = Some(now);
                    let ids = conn.tls.handshake_ids();
                    conn.handshake = Some(ids);
                    self.handshake_done(i, ids);
                    let conn = self.slots[i].conn.as_mut().expect("connection");
                    conn.phase = match mode {
                        Mode::KeepAlive => Phase::Idle,
                        _ if has_request => Phase::SendRequest,
                        _ if needs_ticket(mode, conn) => {
                            conn.deadline = now + TICKET_WAIT.min(self.w.cfg.timeout);
                            Phase::AwaitTicket
                        }
                        _ => return Step::OpDone,
                    };
                    if conn.phase == Phase::Idle {
                        return Step::OpDone;
                    }
                    Step::Continue
                }
                Io::Wait => Step::Wait,
                Io::Closed => Step::Failed("closed early (handshake)".into()),
                Io::Failed { kind, .. } => Step::Failed(kind),
            },
            Phase::AwaitTicket => {
                if conn.tls.has_resumable_session() {
                    return Step::OpDone;
                }
                match conn.tls.read(&mut conn.stream, &mut self.rbuf) {
                    Io::Done(_) => Step::Continue,
                    Io::Wait => {
                        if conn.tls.has_resumable_session() {
                            Step::OpDone
                        } else {
                            Step::Wait
                        }
                    }
                    // The server closed: the operation itself succeeded, without a session.
                    Io::Closed | Io::Failed { .. } => Step::OpDone,
                }
            }
            Phase::SendRequest => {
                let request = self.w.request;
                if conn.sent == 0 {
                    conn.request_started = Some(Instant::now());
                    conn.first_byte = None;
                    conn.parser.reset();
                }
                match conn.tls.write(&mut conn.stream, &request[conn.sent..]) {
                    Io::Done(n) => {
                        conn.sent += n;
                        if conn.sent == request.len() {
                            conn.sent = 0;
                            conn.phase = Phase::ReadResponse;
                        }
                        Step::Continue
                    }
                    Io::Wait => Step::Wait,
                    Io::Closed => Step::Failed("closed early (request)".into()),
                    Io::Failed { kind, .. } => Step::Failed(kind),
                }
            }
            Phase::ReadResponse => match conn.tls.read(&mut conn.stream, &mut self.rbuf) {
                Io::Done(n) => {
                    if conn.first_byte.is_none() {
                        conn.first_byte = Some(Instant::now());
                    }
                    match conn.parser.feed(&self.rbuf[..n]) {
                        Ok(true) => self.response_done(i),
                        Ok(false) => Step::Continue,
                        Err(e) => Step::Failed(e.name().into()),
                    }
                }
                Io::Wait => Step::Wait,
                Io::Closed | Io::Failed { eof: true, .. } => match conn.parser.on_close() {
                    Ok(()) => self.response_done(i),
                    Err(e) => Step::Failed(e.name().into()),
                },
                Io::Failed { kind, .. } => Step::Failed(kind),
            },
            Phase::Idle => Step::Wait,
        }
    }

    /// Counts a completed handshake and checks it against the mode's resumption rule.
    fn handshake_done(&mut self, i: usize, ids: ossl::HandshakeIds) {
        let (mode, measured, offered) = {
            let conn = self.slots[i].conn.as_ref().expect("connection");
            (self.w.cfg.mode, conn.measured, conn.offered_session)
        };
        let had_first = std::mem::replace(&mut self.slots[i].had_first, true);
        if !measured || !self.recording() {
            return;
        }
        let conn = self.slots[i].conn.as_ref().expect("connection");
        let now = conn.handshake_done.expect("handshake done");
        let connected = conn.connected.unwrap_or(conn.opened);
        self.rec.hist.connect.record(connected - conn.opened);
        self.rec.hist.handshake.record(now - connected);
        let tls = &conn.tls;
        self.rec.handshake(ids, || tls.negotiated());
        if let Some(wire) = tls.wire() {
            self.rec.wire.add(ids.kind.is_resumed(), &wire);
        }
        let r = &mut self.rec.resumption;
        match mode {
            Mode::Resume { by, .. } if offered => {
                r.offered += 1;
                if ids.kind.is_resumed() {
                    r.resumed += 1;
                    let wanted = match by {
                        ResumeBy::Ticket => HandshakeKind::ResumedTicket,
                        ResumeBy::SessionId => HandshakeKind::ResumedSessionId,
                    };
                    // TLS 1.3 resumes only by ticket (PSK), whatever was asked.
                    if ids.kind != wanted && ids.version != 0x0304 {
                        r.resumed_other_kind += 1;
                    }
                }
            }
            _ if ids.kind.is_resumed() && (mode == Mode::Full || !had_first) => {
                r.unexpected += 1;
            }
            _ => {}
        }
    }

    /// A response is complete: count it; the operation ends here unless a ticket is awaited.
    fn response_done(&mut self, i: usize) -> Step {
        let mode = self.w.cfg.mode;
        let measured = self.slots[i].op.is_some_and(|op| op.measured) && self.recording();
        let conn = self.slots[i].conn.as_mut().expect("connection");
        conn.requests += 1;
        let now = Instant::now();
        if measured {
            let started = conn.request_started.unwrap_or(now);
            self.rec.hist.request.record(now - started);
            if let Some(first) = conn.first_byte {
                self.rec.hist.ttfb.record(first - started);
            }
            self.rec.requests += 1;
            self.rec.body_bytes += conn.parser.body_bytes;
            let status = conn.parser.status;
            self.rec.status(status);
            if !(200..300).contains(&status) {
                self.rec.error(&format!("http {status}"));
            }
        }
        if mode != Mode::KeepAlive && needs_ticket(mode, conn) {
            conn.deadline = now + TICKET_WAIT.min(self.w.cfg.timeout);
            conn.phase = Phase::AwaitTicket;
            return Step::Continue;
        }
        if mode == Mode::KeepAlive {
            conn.phase = Phase::Idle;
        }
        Step::OpDone
    }

    /// The slot's operation finished successfully.
    fn op_done(&mut self, i: usize) {
        let now = Instant::now();
        let mode = self.w.cfg.mode;
        let recording = self.recording();
        if let Some(op) = self.slots[i].op.take() {
            if op.measured && recording {
                self.rec.ops += 1;
                self.rec.second(
                    now.saturating_duration_since(self.w.shared.measure_start),
                    false,
                );
                self.rec.hist.total.record(now - op.planned);
                self.rec.hist.total_uncorrected.record(now - op.started);
                if let Some(late) = op.pacer_late {
                    self.rec.hist.pacer_late.record(late);
                }
                self.w.shared.progress[self.w.index]
                    .ops
                    .fetch_add(1, Relaxed);
            }
        }
        let keep = match mode {
            Mode::KeepAlive => self.slots[i]
                .conn
                .as_ref()
                .is_some_and(|c| c.phase == Phase::Idle && !c.parser.closes),
            _ => false,
        };
        if !keep {
            self.close(i, None);
        }
        self.start_next(i, now);
    }

    /// The operation or connection failed: count the error, drop the connection, carry on.
    fn fail(&mut self, i: usize, kind: String) {
        let measured = match self.slots[i].op.take() {
            Some(op) => op.measured,
            None => self.slots[i].conn.as_ref().is_some_and(|c| c.measured),
        };
        if measured && self.recording() {
            self.rec.error(&kind);
            self.rec.second(
                Instant::now().saturating_duration_since(self.w.shared.measure_start),
                true,
            );
            self.w.shared.progress[self.w.index]
                .errors
                .fetch_add(1, Relaxed);
        }
        self.close(i, Some(kind));
        self.retry.push(i);
    }

    /// Closes the slot's connection, keeping its session (resume mode) and writing its row.
    fn close(&mut self, i: usize, error: Option<String>) {
        let Some(mut conn) = self.slots[i].conn.take() else {
            return;
        };
        if matches!(self.w.cfg.mode, Mode::Resume { .. }) && error.is_none() {
            if conn.tls.has_resumable_session() {
                conn.tls.keep_session(&mut self.slots[i].session);
            } else if conn.measured && self.recording() {
                self.rec.resumption.no_session += 1;
            }
        }
        if error.is_none() && !conn.parser.closes {
            // close_notify (the peer's is not awaited); not when the server said it closes,
            // where ours would meet a closing socket.
            conn.tls.shutdown(&mut conn.stream);
        }
        // Freed without a completed shutdown, OpenSSL would mark the session we keep as not
        // resumable.
        conn.tls.mark_shut_down();
        // Closing the socket (when `conn` drops) removes it from epoll: no deregister call.
        if self.w.cfg.record_connections && conn.measured && self.recording() {
            self.rec.rows.push(self.row(&conn, error));
        }
    }

    fn row(&self, conn: &Conn, error: Option<String>) -> ConnectionRow {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let now = Instant::now();
        let connected = conn.connected.unwrap_or(conn.opened);
        let names = conn.handshake.and_then(|ids| self.rec.names.get(&ids));
        ConnectionRow {
            thread: self.w.index,
            start_us: us(conn.opened.saturating_duration_since(self.w.shared.start)),
            connect_us: conn.connected.map_or(0, |c| us(c - conn.opened)),
            handshake_us: conn.handshake_done.map_or(0, |h| us(h - connected)),
            ttfb_us: match (conn.request_started, conn.first_byte) {
                (Some(s), Some(f)) => Some(us(f.saturating_duration_since(s))),
                _ => None,
            },
            request_us: conn.request_started.map(|s| us(now - s)),
            total_us: us(now - conn.opened),
            handshake: conn.handshake.map_or("", |ids| ids.kind.name()).to_string(),
            version: names.map(|n| n.version.clone()).unwrap_or_default(),
            cipher: names.map(|n| n.cipher.clone()).unwrap_or_default(),
            group: names.and_then(|n| n.group.clone()),
            requests: conn.requests,
            error,
        }
    }

    fn sweep_timeouts(&mut self, now: Instant) {
        for i in 0..self.slots.len() {
            let Some(conn) = self.slots[i].conn.as_ref() else {
                continue;
            };
            if conn.phase == Phase::Idle || now < conn.deadline {
                continue;
            }
            match conn.phase {
                // No ticket in time: the operation succeeded; the slot has no session.
                Phase::AwaitTicket => self.op_done(i),
                phase => self.fail(i, format!("timeout ({})", phase_name(phase))),
            }
        }
    }
}

fn needs_ticket(mode: Mode, conn: &Conn) -> bool {
    matches!(mode, Mode::Resume { .. })
        && conn.handshake.is_some_and(|ids| ids.version == 0x0304)
        && !conn.tls.has_resumable_session()
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Connecting => "connect",
        Phase::Handshaking => "handshake",
        Phase::AwaitTicket => "ticket",
        Phase::SendRequest => "request",
        Phase::ReadResponse => "response",
        Phase::Idle => "idle",
    }
}

/// A non-blocking socket connecting to `target`, optionally from `source` (port chosen at
/// connect time, so many sources multiply the usable 4-tuples).
fn connect(target: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpStream> {
    let socket = Socket::new(
        Domain::for_address(target),
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    socket.set_tcp_nodelay(true)?;
    if let Some(ip) = source {
        bind_address_no_port(&socket)?;
        socket.bind(&SocketAddr::new(ip, 0).into())?;
    }
    match socket.connect(&target.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(TcpStream::from_std(socket.into()))
}

/// Lets `bind` fix only the source address: the port is picked at `connect`, unique per
/// 4-tuple rather than per address.
fn bind_address_no_port(socket: &Socket) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: a valid socket fd and a pointer to an int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn connect_error_kind(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "refused".into(),
        Some(libc::ECONNRESET) | Some(libc::EPIPE) => "reset".into(),
        Some(libc::ETIMEDOUT) => "timeout (connect)".into(),
        Some(libc::EADDRNOTAVAIL) => "no local address or port left".into(),
        _ => format!("connect: {e}"),
    }
}
