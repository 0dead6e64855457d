//! Waking an open-loop load thread on time for each planned start.
//!
//! `epoll_wait` takes its timeout in whole milliseconds (mio rounds a shorter wait up to one),
//! and the kernel adds the thread's timer slack (50 µs by default) on top: a paced run that
//! waits that way starts each request up to a millisecond late and charges the lateness to the
//! server as coordinated-omission correction. The pacer waits on a `timerfd` (its own hrtimer,
//! slack set to 1 ns) armed a little before the planned start, then polls without blocking for
//! the last stretch. The stretch follows how late the timer has been waking (on a VM, waking an
//! idle CPU alone takes tens of microseconds), so what is left of the pacer's error is a few
//! microseconds; the spinning is the load thread's CPU and shows in the client's CPU figures.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

/// The most a pacer polls without blocking before a planned start.
const MAX_SPIN: Duration = Duration::from_micros(250);
/// Its first guess of the timer's lateness.
const FIRST_GUESS: Duration = Duration::from_micros(20);

/// A load thread's pacing: its timer and how late the timer has been waking.
pub struct Pacer {
    timer: Timer,
    /// When the armed timer should expire.
    armed_for: Option<Instant>,
    /// Moving average of the timer's lateness, in nanoseconds.
    late_ns: f64,
}

impl Pacer {
    /// A pacer whose timer wakes `registry`'s loop under `token`.
    pub fn new(registry: &Registry, token: Token) -> io::Result<Pacer> {
        let timer = Timer::new()?;
        timer.register(registry, token)?;
        Ok(Pacer {
            timer,
            armed_for: None,
            late_ns: FIRST_GUESS.as_nanos() as f64,
        })
    }

    /// How long the loop may block in epoll before `planned`: zero within the last stretch
    /// (the loop then polls until it is due), else the timer is armed for the stretch's start
    /// and the loop may block until it (or an I/O event) wakes it.
    pub fn wait(&mut self, now: Instant, planned: Instant) -> io::Result<Duration> {
        let until = planned.saturating_duration_since(now);
        let stretch = self.stretch();
        if until <= stretch {
            return Ok(Duration::ZERO);
        }
        let at = planned - stretch;
        if self.armed_for != Some(at) {
            self.timer.arm(until - stretch)?;
            self.armed_for = Some(at);
        }
        Ok(Duration::MAX)
    }

    /// The timer expired (its token came out of epoll at `now`): learns how late it was.
    pub fn woke(&mut self, now: Instant) {
        self.timer.clear();
        if let Some(at) = self.armed_for.take() {
            let late = now.saturating_duration_since(at).min(MAX_SPIN);
            self.late_ns = 0.9 * self.late_ns + 0.1 * late.as_nanos() as f64;
        }
    }

    /// How long before a planned start the pacer stops blocking: twice the usual lateness.
    fn stretch(&self) -> Duration {
        Duration::from_nanos((2.0 * self.late_ns) as u64 + 2_000).min(MAX_SPIN)
    }
}

/// A one-shot `timerfd` on `CLOCK_MONOTONIC` (the clock of `Instant`).
pub struct Timer {
    fd: OwnedFd,
}

impl Timer {
    /// A timer for this thread, whose timer slack it also sets to the least (1 ns): the
    /// kernel otherwise lets a waiting thread's wake-up slip by up to its slack.
    pub fn new() -> io::Result<Timer> {
        // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only this thread's slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        // SAFETY: timerfd_create takes no pointers; a negative result is an error.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just created and is owned by nothing else.
        Ok(Timer {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Watches the timer's expiry under `token`.
    pub fn register(&self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(
            &mut SourceFd(&self.fd.as_raw_fd()),
            token,
            Interest::READABLE,
        )
    }

    /// Expires once, `after` from now (at least a nanosecond: zero would disarm it).
    pub fn arm(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(after.subsec_nanos() as i32),
            },
        };
        // SAFETY: the fd is a timerfd; `spec` is a valid itimerspec; the old value is not asked.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Consumes an expiry, so the fd stops being readable until the next.
    pub fn clear(&self) {
        let mut expirations = [0u8; 8];
        // SAFETY: reads at most 8 bytes into the buffer; EAGAIN (not expired) is fine.
        unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                expirations.as_mut_ptr().cast(),
                expirations.len(),
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Waiting 300 µs through epoll with the timer takes about 300 µs, not a millisecond.
    #[test]
    fn wakes_an_epoll_loop_well_under_a_millisecond() {
        let mut poll = mio::Poll::new().unwrap();
        let timer = Timer::new().unwrap();
        timer.register(poll.registry(), Token(7)).unwrap();
        let mut events = mio::Events::with_capacity(4);
        let mut best = Duration::MAX;
        for _ in 0..20 {
            let t = Instant::now();
            timer.arm(Duration::from_micros(300)).unwrap();
            poll.poll(&mut events, Some(Duration::from_millis(50)))
                .unwrap();
            best = best.min(t.elapsed());
            assert!(events.iter().any(|e| e.token() == Token(7)));
            timer.clear();
        }
        assert!(best >= Duration::from_micros(300), "{best:?}");
        assert!(best < Duration::from_micros(900), "{best:?}");
    }
}
