//! Servers tlsscope starts as child processes for its experiments (`lab`, `compare`), and stops
//! when done.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

/// A server process we started; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub _dir: Option<tempfile::TempDir>,
}

impl ServerProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill signals a child we started and have not reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tlsscope [--openssl X] serve` as a child, pinned, on a free loopback port.
pub fn start_builtin(
    openssl: Option<&str>,
    cert_type: &str,
    cpu: usize,
    extra: &[&str],
) -> anyhow::Result<ServerProcess> {
    let exe = std::env::current_exe().context("finding the tlsscope executable")?;
    let mut cmd = Command::new(exe);
    if let Some(o) = openssl {
        cmd.args(["--openssl", o]);
    }
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--threads", "1"])
        .args(["--cpus", &cpu.to_string(), "--cert-type", cert_type])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().context("starting tlsscope serve")?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    // Keep draining, so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let addr = first
        .split("https://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.trim_end_matches('/').parse().ok());
    let Some(addr) = addr else {
        let mut server = ServerProcess {
            child,
            addr: "127.0.0.1:0".parse().expect("literal address"),
            _dir: None,
        };
        let mut err = String::new();
        if let Some(mut e) = server.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        bail!("tlsscope serve did not start: {}", err.trim());
    };
    Ok(ServerProcess {
        child,
        addr,
        _dir: None,
    })
}
