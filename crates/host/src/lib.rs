//! `host`: the machine tlsscope runs on. Pinning threads to CPUs, which CPUs share a core, the
//! CPU time that threads, this process and other processes have used, and where a thread's
//! wall time went (on a CPU, waiting for one, blocked); the wall clock and its discipline.

use std::io;

pub mod clock;
mod direct;
pub use direct::DirectFile;
mod sched;
pub use sched::{Spent, ThreadTimes};
pub mod topology;

/// CPUs online on this machine. Not `available_parallelism`, which counts only the CPUs this
/// process may run on: under `taskset -c 1` it is 1, yet CPU 1 is the one asked for.
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// The crate's error: a setting this machine cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A CPU number beyond the CPUs online (`online` of them, numbered from 0).
    #[error("CPU {cpu}: this machine has CPUs 0 to {}", online - 1)]
    NoSuchCpu { cpu: usize, online: usize },
}

/// Checks that every CPU in `cpus` exists here; the error names the first that does not.
pub fn check_cpus(cpus: &[usize]) -> Result<(), Error> {
    let online = online_cpus();
    match cpus.iter().find(|&&c| c >= online) {
        Some(&cpu) => Err(Error::NoSuchCpu { cpu, online }),
        None => Ok(()),
    }
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::other(format!("CPU {cpu} is out of range")));
    }
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set, CPU_SET stays in bounds
    // (checked above), and pid 0 means the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// (user, system) CPU seconds from `getrusage`.
fn rusage_s(who: libc::c_int) -> (f64, f64) {
    // SAFETY: getrusage fills the zeroed struct we pass; `who` is RUSAGE_SELF or RUSAGE_THREAD.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut u);
        u
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (tv(usage.ru_utime), tv(usage.ru_stime))
}

/// CPU seconds (user + system) the calling thread has used.
pub fn thread_cpu_s() -> f64 {
    let (user, system) = rusage_s(libc::RUSAGE_THREAD);
    user + system
}

/// (user, system) CPU seconds this process has used, all threads.
pub fn process_cpu_s() -> (f64, f64) {
    rusage_s(libc::RUSAGE_SELF)
}

/// (user, system) CPU seconds another process has used, from /proc/PID/stat.
pub fn proc_cpu_s(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields resume after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no memory effects.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime / ticks, stime / ticks))
}

/// CPU seconds (user + system, every thread, live or exited) another process has used, to
/// the nanosecond: its CPU-time clock (`clock_getcpuclockid`), where /proc/PID/stat counts
/// whole clock ticks (10 ms here).
pub fn proc_cpu_total_s(pid: u32) -> Option<f64> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: writes the clock id into `clock`; a nonzero result is an error number.
    if unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) } != 0 {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}

/// Makes room for `wanted` open descriptors: raises the soft limit (up to the hard one) when
/// it is lower. Returns the soft limit now in force, or the error of reading it.
pub fn raise_fd_limit(wanted: u64) -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur >= wanted || lim.rlim_cur >= lim.rlim_max {
        return Ok(lim.rlim_cur);
    }
    let raised = libc::rlimit {
        rlim_cur: wanted.min(lim.rlim_max),
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads the struct it is given; a soft limit up to the hard one is allowed.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Ok(lim.rlim_cur);
    }
    Ok(raised.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_process_s_cpu_time_has_sub_tick_resolution() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut readings = Vec::new();
        while child.try_wait().unwrap().is_none() {
            if let Some(s) = proc_cpu_total_s(pid) {
                readings.push(s);
            }
        }
        assert!(readings.len() > 2, "{readings:?}");
        // Clock ticks would make every reading a multiple of 10 ms.
        let tick = 1.0 / 100.0;
        assert!(
            readings
                .iter()
                .any(|s| *s > 0.0 && ((s / tick) - (s / tick).round()).abs() > 1e-3),
            "{readings:?}"
        );
        assert!(readings.windows(2).all(|w| w[1] >= w[0]), "{readings:?}");
    }

    #[test]
    fn own_cpu_time_is_readable_and_grows() {
        let (user, system) = proc_cpu_s(std::process::id()).expect("own /proc stat");
        assert!(user >= 0.0 && system >= 0.0);
        let before = thread_cpu_s();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(thread_cpu_s() > before);
    }

    #[test]
    fn cpus_beyond_the_machine_are_named() {
        assert!(check_cpus(&[0]).is_ok());
        let err = check_cpus(&[100_000]).unwrap_err();
        assert_eq!(
            err,
            Error::NoSuchCpu {
                cpu: 100_000,
                online: online_cpus()
            }
        );
        assert!(
            err.to_string()
                .starts_with("CPU 100000: this machine has CPUs 0 to"),
            "{err}"
        );
    }
}
