//! The wall clock: what the kernel's clock discipline says of its own error, and sleeping
//! until a wall-clock instant.
//!
//! Shards of one run on different machines start at the same wall-clock time; they start
//! together only as far as their clocks agree. The kernel keeps the NTP discipline's state
//! (`adjtimex(2)` with no mode bits reads it and changes nothing, and needs no privilege):
//! whether a time daemon has marked the clock synchronised, and its estimated error. Two
//! synchronised clocks may differ by up to the sum of their estimated errors.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The clock discipline's view of this host's wall clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockDiscipline {
    /// A time daemon keeps the clock synchronised (the kernel's state is not `TIME_ERROR` and
    /// its status lacks `STA_UNSYNC`).
    pub synchronised: bool,
    /// The estimated error, in microseconds (meaningful only when synchronised).
    pub estimated_error_us: i64,
    /// The maximum error, in microseconds.
    pub max_error_us: i64,
}

/// Reads the clock discipline; None where the kernel does not say (the call failed).
pub fn discipline() -> Option<ClockDiscipline> {
    // SAFETY: timex is plain data and zeroed is a valid value; modes = 0 only reads the
    // kernel's state into it.
    let (state, tx) = unsafe {
        let mut tx: libc::timex = std::mem::zeroed();
        let state = libc::adjtimex(&mut tx);
        (state, tx)
    };
    if state < 0 {
        return None;
    }
    Some(ClockDiscipline {
        synchronised: state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0,
        estimated_error_us: tx.esterror,
        max_error_us: tx.maxerror,
    })
}

/// Nanoseconds since the Unix epoch of `t` (0 before it).
pub fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// How long before the instant `sleep_until` stops sleeping and polls the clock.
const SPIN: Duration = Duration::from_micros(300);
/// The longest one sleep lasts before `stop` is checked again.
const SLICE: Duration = Duration::from_millis(50);

/// Sleeps until the wall clock reads `at` (at once if it already does): an absolute sleep on
/// `CLOCK_REALTIME` to a little before it (so a clock step while asleep is followed), then
/// polling the clock for the last few hundred microseconds. Returns the wall-clock time at
/// which it returned, or None as soon as `stop` is set (a signal handler sets it; the signal
/// also ends the sleep).
pub fn sleep_until(at: SystemTime, stop: &AtomicBool) -> Option<SystemTime> {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only this thread's slack (the
    // kernel would otherwise let the wake-up slip by up to 50 µs).
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let early = at.checked_sub(SPIN).unwrap_or(at);
    loop {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let now = SystemTime::now();
        if now >= early {
            break;
        }
        // In slices, so a stop flag set while another thread took the signal is seen soon.
        let ns = unix_ns(early.min(now + SLICE));
        let spec = libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: an absolute sleep on the realtime clock; `spec` is a valid timespec and no
        // remainder is asked for (absolute sleeps have none).
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_REALTIME,
                libc::TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        // EINTR: a signal (clock_nanosleep is never restarted); the loop checks `stop` and the
        // clock. Any other error: poll.
        if rc != 0 && rc != libc::EINTR {
            break;
        }
    }
    loop {
        let now = SystemTime::now();
        if now >= at {
            return Some(now);
        }
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        if at.duration_since(now).unwrap_or_default() > SPIN * 2 {
            std::thread::sleep(Duration::from_micros(100));
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_discipline_can_be_read_without_privilege() {
        let d = discipline().expect("adjtimex reads");
        assert!(d.max_error_us >= 0, "{d:?}");
        assert!(d.estimated_error_us >= 0, "{d:?}");
    }

    #[test]
    fn sleeping_until_an_instant_wakes_within_a_millisecond_after_it() {
        for _ in 0..5 {
            let at = SystemTime::now() + Duration::from_millis(20);
            let woke = sleep_until(at, &AtomicBool::new(false)).unwrap();
            let late = woke.duration_since(at).expect("not early");
            assert!(late < Duration::from_millis(1), "{late:?} late");
        }
    }

    #[test]
    fn an_instant_in_the_past_returns_at_once() {
        let t = std::time::Instant::now();
        let never = AtomicBool::new(false);
        assert!(sleep_until(SystemTime::now() - Duration::from_secs(5), &never).is_some());
        assert!(t.elapsed() < Duration::from_millis(5));
    }

    #[test]
    fn a_stop_ends_the_wait() {
        let stop = AtomicBool::new(false);
        let t = std::time::Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                stop.store(true, Ordering::Relaxed);
            });
            // The flag alone (no signal to end the sleep) is seen within a slice.
            let at = SystemTime::now() + Duration::from_millis(200);
            assert_eq!(sleep_until(at, &stop), None);
        });
        assert!(
            t.elapsed() < Duration::from_millis(190),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn unix_ns_counts_from_the_epoch() {
        assert_eq!(unix_ns(UNIX_EPOCH + Duration::from_nanos(1_500)), 1_500);
        assert_eq!(unix_ns(UNIX_EPOCH - Duration::from_secs(1)), 0);
    }
}
