//! Running Debian's `perf`: record a process's stacks for a while, then read them back.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::stacks::{lost_chunks, parse_perf_script, Profile};
use crate::tailcalls::Restorer;

/// How stacks are sampled.
#[derive(Clone, Debug)]
pub struct Sampler {
    /// Samples per second of CPU time (cpu-clock). 999 rather than 1000, so that sampling does
    /// not run in step with timers of round periods.
    pub frequency_hz: u32,
    /// Bytes of user stack copied with each sample, for the DWARF unwinder: deep enough for a
    /// handshake's stack through Rust, libssl and libcrypto.
    pub stack_bytes: u32,
    /// The perf program.
    pub perf: PathBuf,
}

impl Default for Sampler {
    fn default() -> Sampler {
        Sampler {
            frequency_hz: 999,
            stack_bytes: 16384,
            perf: PathBuf::from("perf"),
        }
    }
}

/// A finished recording.
#[derive(Clone, Debug)]
pub struct Recording {
    pub data: PathBuf,
    pub pid: u32,
    /// How long perf recorded (wall time).
    pub window: Duration,
    /// The connections the process made or took while it was sampled, where perf could count
    /// them (its syscall tracepoints).
    pub connections: Option<Connections>,
}

/// Connections a process took (`accept`, `accept4` that returned a socket) and opened
/// (`connect` that succeeded or, non-blocking, got under way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Connections {
    pub accepted: u64,
    pub opened: u64,
}

impl Connections {
    pub fn total(&self) -> u64 {
        self.accepted + self.opened
    }

    /// Reads `perf stat -x,` output of [`CONNECTION_EVENTS`]: `COUNT,UNIT,EVENT,...` lines.
    pub fn from_perf_stat(text: &str) -> Option<Connections> {
        let mut c = Connections::default();
        let mut seen = false;
        for line in text.lines() {
            let fields: Vec<&str> = line.split(',').collect();
            let (Some(count), Some(event)) = (fields.first(), fields.get(2)) else {
                continue;
            };
            let Ok(n) = count.trim().parse::<u64>() else {
                continue;
            };
            match *event {
                "syscalls:sys_exit_accept" | "syscalls:sys_exit_accept4" => c.accepted += n,
                "syscalls:sys_exit_connect" => c.opened += n,
                _ => continue,
            }
            seen = true;
        }
        seen.then_some(c)
    }
}

/// The syscall exits that count connections, each with the filter that keeps the successful
/// ones (a non-blocking connect's -EINPROGRESS is a connection under way).
const CONNECTION_EVENTS: [(&str, &str); 3] = [
    ("syscalls:sys_exit_accept4", "ret >= 0"),
    ("syscalls:sys_exit_accept", "ret >= 0"),
    ("syscalls:sys_exit_connect", "ret == 0 || ret == -115"),
];

/// Why sampling could not be done.
#[derive(Debug)]
pub enum PerfError {
    NotFound { perf: PathBuf },
    NotPermitted { paranoid: i32 },
    NoProcess { pid: u32 },
    Failed { what: String, detail: String },
}

impl fmt::Display for PerfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerfError::NotFound { perf } => write!(
                f,
                "{} not found: profiling drives Debian's perf (package linux-perf); run `make deps`",
                perf.display()
            ),
            PerfError::NotPermitted { paranoid } => write!(
                f,
                "sampling another process needs root or kernel.perf_event_paranoid <= 1 (it is {paranoid}): run as root"
            ),
            PerfError::NoProcess { pid } => {
                write!(f, "no process {pid}: give the PID of a running process")
            }
            PerfError::Failed { what, detail } => write!(f, "{what} failed: {detail}"),
        }
    }
}

impl std::error::Error for PerfError {}

impl Sampler {
    /// perf's version, or why it cannot sample other processes here (permission first: without
    /// it nothing else matters).
    pub fn check(&self) -> Result<String, PerfError> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(2);
        if !root && paranoid > 1 {
            return Err(PerfError::NotPermitted { paranoid });
        }
        let out = Command::new(&self.perf)
            .arg("--version")
            .output()
            .map_err(|_| PerfError::NotFound {
                perf: self.perf.clone(),
            })?;
        if !out.status.success() {
            return Err(PerfError::NotFound {
                perf: self.perf.clone(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// `perf record` with this sampler's event, frequency and stacks, into `data`.
    fn record_command(&self, data: &Path) -> Command {
        let mut cmd = Command::new(&self.perf);
        cmd.args(["record", "-q", "-e", "cpu-clock", "-F"])
            .arg(self.frequency_hz.to_string())
            .arg("--call-graph")
            .arg(format!("dwarf,{}", self.stack_bytes))
            .arg("-o")
            .arg(data);
        cmd
    }

    /// Samples process `pid` (all its threads) for `duration` into `data`, or until `stop` is
    /// set (perf is then asked to stop as Ctrl-C would, and what it sampled is kept). Call
    /// [`Sampler::check`] first.
    pub fn record(
        &self,
        pid: u32,
        duration: Duration,
        data: &Path,
        stop: &AtomicBool,
    ) -> Result<Recording, PerfError> {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return Err(PerfError::NoProcess { pid });
        }
        let failed = |what: &str, e: std::io::Error| PerfError::Failed {
            what: what.into(),
            detail: e.to_string(),
        };
        let log = data.with_extension("log");
        let stderr = std::fs::File::create(&log).map_err(|e| failed("creating perf's log", e))?;
        let started = Instant::now();
        let mut child = self
            .record_command(data)
            .arg("-p")
            .arg(pid.to_string())
            .args(["--", "sleep"])
            .arg(format!("{:.3}", duration.as_secs_f64()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| failed("starting perf record", e))?;
        let counts = data.with_extension("connections");
        // Counting is a bonus: without it the table stays in CPU time. It runs until asked to
        // stop (SIGINT) once the recording is over.
        let mut counter = self.count_command(pid, &counts).spawn().ok();
        let mut asked = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => return Err(failed("waiting for perf record", e)),
            }
            if stop.load(Ordering::Relaxed) && !asked {
                asked = true;
                // SAFETY: kill with a PID this process started and has not reaped.
                unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let window = started.elapsed();
        let connections = counter.as_mut().and_then(|c| {
            // SAFETY: kill with a PID this process started and has not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            c.wait().ok()?;
            Connections::from_perf_stat(&std::fs::read_to_string(&counts).ok()?)
        });
        let _ = std::fs::remove_file(&counts);
        let said = std::fs::read(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        if std::fs::metadata(data).map_or(0, |m| m.len()) == 0 {
            return Err(PerfError::Failed {
                what: format!("perf record -p {pid}"),
                detail: first_line(&said).unwrap_or_else(|| format!("it wrote nothing ({status})")),
            });
        }
        Ok(Recording {
            data: data.to_path_buf(),
            pid,
            window,
            connections,
        })
    }

    /// `perf stat` counting process `pid`'s connections into `out`, until SIGINT (no workload:
    /// a `sleep` child would outlive a Ctrl-C, and perf stat would wait for it).
    fn count_command(&self, pid: u32, out: &Path) -> Command {
        let mut cmd = Command::new(&self.perf);
        cmd.args(["stat", "-x,", "-o"]).arg(out);
        for (event, filter) in CONNECTION_EVENTS {
            cmd.args(["-e", event, "--filter", filter]);
        }
        cmd.arg("-p")
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    /// `perf record` of a program to be started (the caller appends it after the returned
    /// command's `--`), sampling only while the program has said `enable` and not yet
    /// `disable` on the FIFO `control` (see [`make_control_fifo`], [`window`]).
    pub fn record_windows(&self, data: &Path, control: &Path) -> Command {
        let mut cmd = self.record_command(data);
        cmd.args(["-D", "-1", "--control"])
            .arg(format!("fifo:{}", control.display()))
            .arg("--");
        cmd
    }

    /// The stacks perf recorded into `data`, as it symbolizes them (`.symtab` where the object
    /// kept it, `.dynsym` otherwise), inlined frames not expanded, with the frames tail calls
    /// hid put back ([`Restorer`]; `known`: callers that call through function pointers, and
    /// what they call).
    pub fn read(&self, data: &Path, known: &[(&str, &str)]) -> Result<(Profile, usize), PerfError> {
        let out = Command::new(&self.perf)
            .args([
                "script",
                "--no-inline",
                "-F",
                "pid,tid,time,period,ip,sym,dso",
                "-i",
            ])
            .arg(data)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| PerfError::Failed {
                what: "starting perf script".into(),
                detail: e.to_string(),
            })?;
        if !out.status.success() {
            return Err(PerfError::Failed {
                what: format!("perf script -i {}", data.display()),
                detail: first_line(&out.stderr).unwrap_or_else(|| out.status.to_string()),
            });
        }
        let (mut profile, skipped) = parse_perf_script(&String::from_utf8_lossy(&out.stdout));
        profile.lost_chunks = lost_chunks(&String::from_utf8_lossy(&out.stderr));
        Restorer::new(known).restore(&mut profile);
        Ok((profile, skipped))
    }
}

fn first_line(bytes: &[u8]) -> Option<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// Makes the FIFO through which a program run under [`Sampler::record_windows`] opens and
/// closes its sampling windows.
pub fn make_control_fifo(path: &Path) -> Result<(), PerfError> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        PerfError::Failed {
            what: "making perf's control FIFO".into(),
            detail: format!("{} holds a NUL byte", path.display()),
        }
    })?;
    // SAFETY: mkfifo with a NUL-terminated path; the result is checked.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(PerfError::Failed {
            what: format!("mkfifo {}", path.display()),
            detail: std::io::Error::last_os_error().to_string(),
        });
    }
    Ok(())
}

/// Opens (`true`) or closes a sampling window of the perf that runs this program, by writing
/// to its control FIFO (perf holds it open from before the program starts, so this does not
/// block).
pub fn window(control: &Path, open: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut fifo = std::fs::OpenOptions::new().write(true).open(control)?;
    fifo.write_all(if open { b"enable\n" } else { b"disable\n" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_read_from_perf_stat() {
        let text = "# started on Mon Nov 23 19:10:00 2026\n\n2454,,syscalls:sys_exit_accept4,1973690866,100.00,,\n3,,syscalls:sys_exit_accept,1973690866,100.00,,\n7,,syscalls:sys_exit_connect,1973690866,100.00,,\n";
        assert_eq!(
            Connections::from_perf_stat(text),
            Some(Connections {
                accepted: 2457,
                opened: 7
            })
        );
        // perf could not count (no such event here): no figure rather than zero.
        assert_eq!(
            Connections::from_perf_stat("<not supported>,,syscalls:sys_exit_accept4,0,100.00,,\n"),
            None
        );
    }
}
