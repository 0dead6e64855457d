//! `tlsscope lab`: the seed experiments in one go. Starts the target (the built-in server or
//! Debian's nginx) pinned to one CPU, loads it from another with the bench engine, and traces
//! the server's TLS library calls, so one report shows each experiment's rates and CPU beside
//! where the server's time went.

use std::fmt::Write as _;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Parser;
use load::RunResult;
use probes::{catalog, Buckets, Groups, Plan, Snapshot, Target, TraceConfig, Tracer};

use crate::args::{BenchArgs, Command as Cli, LabArgs, LabTarget, Opts};
use crate::bench_cmd;
use crate::child_server::{start_builtin, ServerProcess};

/// One experiment: a name, the server (certificate) it needs, and the bench options.
struct Experiment {
    name: &'static str,
    cert: CertKind,
    bench: &'static [&'static str],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CertKind {
    Rsa2048,
    EcdsaP256,
}

impl CertKind {
    /// As `serve --cert-type` names it.
    fn name(self) -> &'static str {
        match self {
            CertKind::Rsa2048 => "rsa2048",
            CertKind::EcdsaP256 => "ecdsa-p256",
        }
    }
}

const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "full handshakes, RSA-2048, TLS 1.3",
        cert: CertKind::Rsa2048,
        bench: &["--mode", "full", "--tls", "1.3"],
    },
    Experiment {
        name: "full handshakes, ECDSA P-256, TLS 1.3",
        cert: CertKind::EcdsaP256,
        bench: &["--mode", "full", "--tls", "1.3"],
    },
    Experiment {
        name: "resumed handshakes, TLS 1.2 (ticket)",
        cert: CertKind::Rsa2048,
        bench: &["--mode", "resume", "--tls", "1.2"],
    },
    Experiment {
        name: "resumed handshakes, TLS 1.3 (ticket)",
        cert: CertKind::Rsa2048,
        bench: &["--mode", "resume", "--tls", "1.3"],
    },
    Experiment {
        name: "keep-alive requests, GET /",
        cert: CertKind::Rsa2048,
        bench: &["--mode", "keepalive"],
    },
];

pub fn run(openssl: Option<&str>, a: &LabArgs) -> anyhow::Result<ExitCode> {
    probes::latency::check_can_trace().context("tlsscope lab traces the server")?;
    host::check_cpus("--server-cpu", &[a.server_cpu]).map_err(anyhow::Error::msg)?;
    host::check_cpus("--client-cpu", &[a.client_cpu]).map_err(anyhow::Error::msg)?;
    if a.server_cpu == a.client_cpu {
        bail!("--server-cpu and --client-cpu must differ, or the client's CPU use is the server's");
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, interrupted.clone())?;
    }
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "tlsscope lab: {} on CPU {}, load on CPU {}; each experiment {:.0} s untraced, then {:.0} s traced",
        match a.target {
            LabTarget::Builtin => "the built-in server",
            LabTarget::Nginx => "nginx (Debian's, one process)",
        },
        a.server_cpu,
        a.client_cpu,
        a.duration.as_secs_f64(),
        a.trace_duration.as_secs_f64()
    )?;
    out.flush()?;
    let mut failed = Vec::new();
    let mut calibration = None;
    let mut not_attached: Vec<&'static str> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for cert in [CertKind::Rsa2048, CertKind::EcdsaP256] {
        let server = match a.target {
            LabTarget::Builtin => start_builtin(openssl, cert.name(), a.server_cpu, &[])?,
            LabTarget::Nginx => start_nginx(cert, a.server_cpu)?,
        };
        let plan = Plan::new(&[Target::Pid(server.pid())], Groups::all(), false)?;
        for e in EXPERIMENTS.iter().filter(|e| e.cert == cert) {
            if interrupted.load(Ordering::Relaxed) {
                break;
            }
            let mut text = String::new();
            let traced = Traced {
                plan: &plan,
                calibration: &mut calibration,
                not_attached: &mut not_attached,
                notes: &mut notes,
            };
            if let Err(err) = experiment(openssl, a, e, &server, traced, &interrupted, &mut text) {
                let _ = writeln!(text, "  failed: {err:#}");
                failed.push(e.name);
            }
            write!(out, "{text}")?;
            out.flush()?;
        }
    }
    if let Some(c) = calibration {
        writeln!(
            out,
            "\nprobe cost on this machine: {:.2} us per probed call (measured on {} calls of a function in tlsscope)",
            c.cost_ns_per_call() / 1000.0,
            c.calls
        )?;
    }
    if !not_attached.is_empty() {
        writeln!(
            out,
            "not traced in this library: {} (internal functions need a library with its symbol table, e.g. --openssl 1.1.1w)",
            not_attached.join(", ")
        )?;
    }
    writeln!(
        out,
        "\nlab finished in {:.0} s",
        started.elapsed().as_secs_f64()
    )?;
    if interrupted.load(Ordering::Relaxed) {
        return Ok(ExitCode::from(130));
    }
    if !failed.is_empty() {
        eprintln!("tlsscope: error: experiments failed: {}", failed.join("; "));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// What the traced half of an experiment needs, and what it reports back.
struct Traced<'a> {
    plan: &'a Plan,
    calibration: &'a mut Option<probes::Calibration>,
    not_attached: &'a mut Vec<&'static str>,
    /// Notes about the kernel hooks already shown (each is said once per lab).
    notes: &'a mut Vec<String>,
}

/// Runs one experiment untraced, then traced (the probes attached only for that half, so the
/// untraced figures do not pay for them), and renders its part of the report.
fn experiment(
    openssl: Option<&str>,
    a: &LabArgs,
    e: &Experiment,
    server: &ServerProcess,
    t: Traced<'_>,
    interrupted: &AtomicBool,
    text: &mut String,
) -> anyhow::Result<()> {
    let _ = writeln!(text, "\n== {}", e.name);
    let untraced = bench(openssl, a, e, server, a.duration, a.warmup, interrupted)?;
    let config = TraceConfig {
        pids: vec![server.pid()],
        comm: None,
        buckets: Buckets::Log2,
        per_pid: false,
        attach_all: false,
    };
    let mut tracer = Tracer::start(&config, t.plan)?;
    if t.calibration.is_none() {
        *t.calibration = Some(tracer.calibrate(20_000)?);
    }
    for m in tracer.not_attached() {
        if !t.not_attached.contains(&m.function) {
            t.not_attached.push(m.function);
        }
    }
    if let Some(note) = crate::trace_cmd::syscall_hooks_note(&tracer) {
        if !t.notes.contains(&note) {
            let _ = writeln!(text, "  note: {note}");
            t.notes.push(note);
        }
    }
    let traced = bench(
        openssl,
        a,
        e,
        server,
        a.trace_duration,
        Duration::ZERO,
        interrupted,
    )?;
    let delta = tracer.snapshot()?;
    drop(tracer);
    render(text, &untraced, &traced, &delta);
    if let Err(problem) = check(&untraced).and(check(&traced)) {
        bail!("{problem}");
    }
    Ok(())
}

/// A run that broke its own rules (errors, resumption not obtained) fails the experiment.
fn check(r: &RunResult) -> Result<(), String> {
    if let Some(problem) = &r.resumption.problem {
        return Err(format!("--mode {}: {problem}", r.mode));
    }
    if r.errors_total > 0 {
        return Err(format!(
            "{} operations failed: {:?}",
            r.errors_total, r.errors
        ));
    }
    if r.ops == 0 {
        return Err("no operation completed".into());
    }
    Ok(())
}

fn bench(
    openssl: Option<&str>,
    a: &LabArgs,
    e: &Experiment,
    server: &ServerProcess,
    duration: Duration,
    warmup: Duration,
    interrupted: &AtomicBool,
) -> anyhow::Result<RunResult> {
    let target = server.addr.to_string();
    let connections = a.connections.to_string();
    let cpus = a.client_cpu.to_string();
    let duration = format!("{}ms", duration.as_millis());
    let warmup = format!("{}ms", warmup.as_millis());
    let pid = server.pid().to_string();
    let mut argv = vec!["tlsscope", "bench", target.as_str()];
    argv.extend_from_slice(e.bench);
    argv.extend_from_slice(&[
        "-c",
        &connections,
        "--cpus",
        &cpus,
        "-d",
        &duration,
        "--warmup",
        &warmup,
        "--server-pid",
        &pid,
    ]);
    let args = bench_args(&argv)?;
    let (doc, _) = bench_cmd::measure(openssl, &args, interrupted)?;
    Ok(doc.result)
}

/// The lab's bench options, parsed by the same definitions as `tlsscope bench`.
fn bench_args(argv: &[&str]) -> anyhow::Result<BenchArgs> {
    match Opts::try_parse_from(argv)
        .map_err(|e| anyhow::anyhow!("lab's bench options: {e}"))?
        .command
    {
        Cli::Bench(args) => Ok(*args),
        _ => bail!("lab's bench options did not parse as bench"),
    }
}

/// The experiment's section: what was obtained, rates and CPU untraced and traced, then the
/// server-side calls per operation.
fn render(text: &mut String, untraced: &RunResult, traced: &RunResult, delta: &Snapshot) {
    let per = if untraced.mode == "keepalive" {
        "request"
    } else {
        "handshake"
    };
    for n in untraced.negotiated.iter().take(2) {
        let share = 100.0 * n.count as f64 / untraced.handshakes.total.max(1) as f64;
        let _ = writeln!(
            text,
            "  obtained   {share:.0}%: {} {} {} {} {}",
            n.version,
            n.cipher,
            n.group.as_deref().unwrap_or("-"),
            n.signature.as_deref().unwrap_or("-"),
            n.handshake
        );
    }
    let change = 100.0 * (traced.ops_per_s / untraced.ops_per_s.max(1e-9) - 1.0);
    let _ = writeln!(
        text,
        "  rate       {:.0} {per}s/s untraced; {:.0}/s traced ({change:+.0}%)",
        untraced.ops_per_s, traced.ops_per_s
    );
    let lat = if per == "request" {
        &untraced.latency.request
    } else {
        &untraced.latency.handshake
    };
    let _ = writeln!(
        text,
        "  latency    {per} p50 {} p99 {} (client side, untraced)",
        report::duration(lat.p50_us as f64),
        report::duration(lat.p99_us as f64)
    );
    let server_us_per_op = |r: &RunResult| {
        r.cpu.server.as_ref().map(|s| {
            (
                s.busy_pct,
                (s.user_s + s.system_s) * 1e6 / r.ops.max(1) as f64,
            )
        })
    };
    let client_us =
        |r: &RunResult| (r.cpu.client_user_s + r.cpu.client_system_s) * 1e6 / r.ops.max(1) as f64;
    if let Some((busy, us)) = server_us_per_op(untraced) {
        let _ = writeln!(
            text,
            "  CPU        server {busy:.0}% of its core, {us:.0} us per {per}; client {:.0} us per {per}",
            client_us(untraced)
        );
    }
    let traced_server_us = server_us_per_op(traced).map_or(0.0, |(_, us)| us);
    let ops = traced.ops.max(1) as f64;
    let _ = writeln!(
        text,
        "  server calls (traced, {} {per}s; log2 buckets, p50/p99 estimated):",
        traced.ops
    );
    let _ = writeln!(
        text,
        "    {:<22} {:<8} {:>8} {:>9} {:>9} {:>9} {:>11}",
        "function", "outcome", "per op", "mean", "p50", "p99", "us per op"
    );
    let mut keys: Vec<(u16, probes::Outcome)> = delta
        .cells
        .iter()
        .map(|c| (c.function, c.outcome))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    for (function, outcome) in keys {
        let Some(f) = catalog::function(function) else {
            continue;
        };
        let buckets: Vec<stats::buckets::Bucket> = delta
            .cells
            .iter()
            .filter(|c| (c.function, c.outcome) == (function, outcome))
            .map(|c| {
                let (low_us, high_us) = Buckets::Log2.range_us(c.bucket);
                stats::buckets::Bucket {
                    low_us,
                    high_us,
                    count: c.count,
                }
            })
            .collect();
        let total_ns: u64 = delta
            .cells
            .iter()
            .filter(|c| (c.function, c.outcome) == (function, outcome))
            .map(|c| c.total_ns)
            .sum();
        let s = stats::buckets::summarize(&buckets, total_ns);
        let _ = writeln!(
            text,
            "    {:<22} {:<8} {:>8.2} {:>9} {:>9} {:>9} {:>11.1}",
            f.name,
            outcome.name(),
            s.count as f64 / ops,
            report::duration(s.mean_us),
            report::duration(s.p50_us),
            report::duration(s.p99_us),
            total_ns as f64 / 1000.0 / ops
        );
    }
    if traced_server_us > 0.0 {
        let _ = writeln!(
            text,
            "    (the server spent {traced_server_us:.0} us of CPU per {per} while traced; calls nest, e.g. SSL_do_handshake holds the EVP_* calls)"
        );
    }
}

/// Debian's nginx, one process (no master), pinned, with a generated config and certificate,
/// session cache and tickets on.
fn start_nginx(cert: CertKind, cpu: usize) -> anyhow::Result<ServerProcess> {
    let nginx = Path::new("/usr/sbin/nginx");
    if !nginx.exists() {
        bail!("--target nginx needs Debian's nginx (/usr/sbin/nginx): run `make deps`");
    }
    let dir = tempfile::tempdir().context("creating nginx's directory")?;
    let root = dir.path();
    let (cert_path, key_path) = make_cert(root, cert)?;
    std::fs::create_dir_all(root.join("html"))?;
    std::fs::write(root.join("html/index.html"), "tlsscope lab page\n")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let conf = root.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(root, port, &cert_path, &key_path))?;
    let child = Command::new("taskset")
        .args(["-c", &cpu.to_string()])
        .arg(nginx)
        .arg("-p")
        .arg(root)
        .arg("-e")
        .arg(root.join("error.log"))
        .arg("-c")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting nginx")?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let mut server = ServerProcess {
        child,
        addr,
        _dir: None,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        if server.child.try_wait()?.is_some() || Instant::now() > deadline {
            let log = std::fs::read_to_string(root.join("error.log")).unwrap_or_default();
            bail!("nginx did not start: {}", log.lines().last().unwrap_or(""));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    server._dir = Some(dir);
    Ok(server)
}

fn make_cert(dir: &Path, cert: CertKind) -> anyhow::Result<(PathBuf, PathBuf)> {
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    let key_args: &[&str] = match cert {
        CertKind::Rsa2048 => &["-newkey", "rsa:2048"],
        CertKind::EcdsaP256 => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
    };
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
        ])
        .args(key_args)
        .arg("-keyout")
        .arg(&k)
        .arg("-out")
        .arg(&c)
        .output()
        .context("running openssl req (Debian's openssl package)")?;
    if !out.status.success() {
        bail!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    Ok((c, k))
}

fn nginx_conf(root: &Path, port: u16, cert: &Path, key: &Path) -> String {
    format!(
        "master_process off;\ndaemon off;\nworker_processes 1;\npid {root}/nginx.pid;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 1000000;\n\
         \x20 ssl_session_cache shared:SSL:10m;\n  ssl_session_tickets on;\n\
         \x20 server {{\n    listen 127.0.0.1:{port} ssl;\n\
         \x20   ssl_certificate {cert};\n    ssl_certificate_key {key};\n\
         \x20   ssl_protocols TLSv1.2 TLSv1.3;\n    root {root}/html;\n  }}\n}}\n",
        root = root.display(),
        cert = cert.display(),
        key = key.display()
    )
}
