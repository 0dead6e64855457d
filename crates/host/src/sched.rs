//! Where a thread's wall time went, from the scheduler's own accounting: on a CPU, waiting for
//! one (runnable but not running), or neither (blocked: in a lock's futex wait, in I/O, asleep).
//! Time on a CPU is the thread's CPU-time clock (exact to the moment it is read); time waiting
//! for a CPU comes from `/proc/thread-self/schedstat` (CONFIG_SCHED_INFO; its on-CPU figure is
//! brought up to date only at ticks and switches, so it is not used) and blocks from
//! `/proc/thread-self/status`.

use std::io;

/// The calling thread's scheduler counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadTimes {
    /// Nanoseconds on a CPU.
    pub on_cpu_ns: u64,
    /// Nanoseconds runnable but waiting for a CPU (another task had it).
    pub runqueue_ns: u64,
    /// Times it gave up its CPU itself: it blocked (a futex wait, I/O, a sleep).
    pub voluntary_switches: u64,
}

impl ThreadTimes {
    /// The calling thread's counters now.
    pub fn now() -> io::Result<ThreadTimes> {
        let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat")?;
        let status = std::fs::read_to_string("/proc/thread-self/status")?;
        let mut t = parse(&schedstat, &status).ok_or_else(|| {
            io::Error::other("/proc/thread-self/schedstat or status is not in the known format")
        })?;
        t.on_cpu_ns = thread_cpu_ns()?;
        Ok(t)
    }

    /// What was spent between `earlier` and `self`, given the wall time between them: the
    /// blocked time is what is left of the wall time once time on a CPU and time waiting for
    /// one are taken out.
    pub fn since(&self, earlier: &ThreadTimes, wall_ns: u64) -> Spent {
        let on_cpu_ns = self.on_cpu_ns.saturating_sub(earlier.on_cpu_ns);
        let runqueue_ns = self.runqueue_ns.saturating_sub(earlier.runqueue_ns);
        Spent {
            on_cpu_ns,
            runqueue_ns,
            blocked_ns: wall_ns.saturating_sub(on_cpu_ns + runqueue_ns),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
        }
    }
}

/// The calling thread's CPU-time clock, in nanoseconds.
fn thread_cpu_ns() -> io::Result<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; the clock is the caller's own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// A thread's wall time over an interval, split by the scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spent {
    pub on_cpu_ns: u64,
    pub runqueue_ns: u64,
    pub blocked_ns: u64,
    pub voluntary_switches: u64,
}

impl std::ops::AddAssign for Spent {
    fn add_assign(&mut self, o: Spent) {
        self.on_cpu_ns += o.on_cpu_ns;
        self.runqueue_ns += o.runqueue_ns;
        self.blocked_ns += o.blocked_ns;
        self.voluntary_switches += o.voluntary_switches;
    }
}

/// schedstat is "on-CPU-ns runqueue-ns timeslices"; status has "voluntary_ctxt_switches:\tN".
fn parse(schedstat: &str, status: &str) -> Option<ThreadTimes> {
    let mut fields = schedstat.split_whitespace().map(str::parse::<u64>);
    let on_cpu_ns = fields.next()?.ok()?;
    let runqueue_ns = fields.next()?.ok()?;
    let voluntary_switches = status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()?;
    Some(ThreadTimes {
        on_cpu_ns,
        runqueue_ns,
        voluntary_switches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernels_two_files() {
        let t = parse(
            "123 45 6\n",
            "Name:\tx\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t8\n",
        );
        assert_eq!(
            t,
            Some(ThreadTimes {
                on_cpu_ns: 123,
                runqueue_ns: 45,
                voluntary_switches: 7
            })
        );
        assert_eq!(parse("x", "voluntary_ctxt_switches: 1"), None);
    }

    #[test]
    fn blocked_time_is_the_wall_time_left_over() {
        let a = ThreadTimes::default();
        let b = ThreadTimes {
            on_cpu_ns: 600,
            runqueue_ns: 100,
            voluntary_switches: 3,
        };
        let s = b.since(&a, 1000);
        assert_eq!((s.blocked_ns, s.voluntary_switches), (300, 3));
    }

    #[test]
    fn a_sleeping_thread_is_counted_blocked() {
        let before = ThreadTimes::now().unwrap();
        let t = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let after = ThreadTimes::now().unwrap();
        let s = after.since(&before, t.elapsed().as_nanos() as u64);
        assert!(s.blocked_ns >= 25_000_000, "{s:?}");
        assert!(s.voluntary_switches >= 1, "{s:?}");
    }
}
