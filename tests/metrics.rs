//! Issue 16: metrics machines scrape. A real Prometheus (Debian's) scrapes `tlsscope trace
//! --metrics-listen` while `tlsscope bench` makes handshakes to the built-in server; promtool
//! checks the exposition and the textfile-collector file; bad options are one line.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{self, text, Serve};
use crate::trace::{calls, listening_on_a_free_port, one_at_a_time, Trace};

const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";

/// A GET over plain HTTP/1.1: the status code and the body.
fn http_get(addr: SocketAddr, path: &str, accept: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status: {head}"));
    // Prometheus answers its API in chunks; what is asked here fits in one.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body.split_once("\r\n")
            .map_or(body, |(_, rest)| rest)
            .rsplit_once("\r\n0\r\n")
            .map_or(body, |(data, _)| data)
            .trim_end_matches("\r\n")
            .to_string()
    } else {
        body.to_string()
    };
    (status, body)
}

/// Percent-encodes a query string value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Debian's Prometheus, scraping one target every second, with its data in a temporary
/// directory; killed when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: tlsscope\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let (child, addr) = listening_on_a_free_port(PROMETHEUS, |port| {
            Command::new(PROMETHEUS)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {PROMETHEUS} (make deps): {e}"))
        });
        let mut p = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        p.wait(Duration::from_secs(60), "ready", |p| {
            TcpStream::connect(p.addr).is_ok() && http_get(p.addr, "/-/ready", "*/*").0 == 200
        });
        p
    }

    /// The value of a PromQL expression that yields one number, if it yields one.
    fn query(&self, promql: &str) -> Option<f64> {
        let (status, body) = http_get(
            self.addr,
            &format!("/api/v1/query?query={}", encode(promql)),
            "application/json",
        );
        assert_eq!(status, 200, "{promql}: {body}");
        let doc: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        doc["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// Waits up to `limit` for `ready`, panicking with Prometheus's log if it does not come.
    fn wait(&mut self, limit: Duration, what: &str, ready: impl Fn(&Prometheus) -> bool) {
        let deadline = Instant::now() + limit;
        while !ready(self) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("prometheus exited ({status}): {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "prometheus: not {what}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("stderr.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `promtool check metrics` on `exposition`: its exit status and what it said.
fn promtool_check(exposition: &str) -> (bool, String) {
    let mut child = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {PROMTOOL} (make deps): {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), text(&out.stdout) + &text(&out.stderr))
}

/// `tlsscope bench` of `count` full handshakes against `serve`, checked to have made them.
/// The server sees one more: bench's first connection, which checks the target before the
/// run.
fn handshakes(serve: &Serve, count: u64) {
    let out = support::tlsscope(&[
        "bench",
        &serve.addr.to_string(),
        "-n",
        &count.to_string(),
        "-c",
        "4",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

// Issue 16.
#[test]
fn prometheus_scrapes_the_handshakes_trace_counts() {
    const N: u64 = 300;
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let pid = serve.pid().to_string();
    // Port 0: trace says which port it got.
    let mut trace = Trace::start(&[
        "-p",
        &pid,
        "--probes",
        "handshake",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    let metrics = support::metrics_addr(&trace.stderr_line("metrics at"));
    let mut prometheus = Prometheus::start(metrics);
    prometheus.wait(Duration::from_secs(30), "scraping tlsscope", |p| {
        p.query(r#"up{job="tlsscope"}"#) == Some(1.0)
    });
    handshakes(&serve, N);
    let served = N + 1;

    // Prometheus sees every one of the server's handshakes, as calls and as handshakes.
    let successes = r#"sum(tlsscope_tls_call_duration_seconds_count{function="SSL_do_handshake",outcome="success"})"#;
    prometheus.wait(Duration::from_secs(30), "seeing the handshakes", |p| {
        p.query(successes) == Some(served as f64)
    });
    assert_eq!(
        prometheus
            .query(r#"sum(tlsscope_tls_handshakes_total{outcome="success",library="libssl"})"#),
        Some(served as f64)
    );
    let median = prometheus
        .query(
            r#"histogram_quantile(0.5, sum by (le) (tlsscope_tls_call_duration_seconds_bucket{function="SSL_do_handshake",outcome="success"}))"#,
        )
        .expect("a median");

    // The exposition itself. Prometheus asks for OpenMetrics first, so what it scraped above
    // was that; promtool reads the Prometheus text format, served to a scraper that does not
    // ask for OpenMetrics.
    let (status, body) = http_get(metrics, "/metrics", "text/plain");
    assert_eq!(status, 200, "{body}");
    let (ok, said) = promtool_check(&body);
    assert!(ok, "promtool check metrics: {said}\n{body}");
    assert!(body.contains("library_version=\"3."), "{body}");
    let (status, body) = http_get(metrics, "/metrics", "application/openmetrics-text");
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(
        body.contains("# TYPE tlsscope_tls_handshakes counter"),
        "{body}"
    );

    // The trace's own table: the same count, and the median in the bucket Prometheus
    // interpolated in.
    let (ok, _stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    assert_eq!(calls(&doc, "SSL_do_handshake", "success"), served);
    let f = doc["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "SSL_do_handshake" && f["outcome"] == "success")
        .unwrap();
    let p50 = f["summary"]["p50_us"].as_f64().unwrap();
    let bucket = f["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| {
            b["low_us"].as_f64().unwrap() <= p50
                && b["high_us"].as_f64().is_none_or(|high| p50 < high)
        })
        .unwrap_or_else(|| panic!("no bucket holds p50 {p50}: {f:#}"));
    let (low, high) = (
        bucket["low_us"].as_f64().unwrap(),
        bucket["high_us"].as_f64().unwrap(),
    );
    assert!(
        (low..=high).contains(&(median * 1e6)),
        "Prometheus's median {} us is outside the bucket [{low}, {high}) us of trace's p50 {p50} us",
        median * 1e6
    );
    serve.stop();
}

// Issue 16.
#[test]
fn the_metrics_textfile_is_what_node_exporter_and_promtool_read() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let pid = serve.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tlsscope.prom");
    let trace = Trace::start(&[
        "-p",
        &pid,
        "--probes",
        "handshake",
        "--metrics-file",
        file.to_str().unwrap(),
    ]);
    handshakes(&serve, 40);
    let (ok, _stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    let exposition = std::fs::read_to_string(&file).unwrap();
    let (ok, said) = promtool_check(&exposition);
    assert!(ok, "promtool check metrics: {said}\n{exposition}");
    assert!(!exposition.contains("# EOF"), "{exposition}");
    // The final figures: the trace's own count.
    let count = calls(&doc, "SSL_do_handshake", "success");
    assert_eq!(count, 41, "40 and bench's first connection");
    let line = exposition
        .lines()
        .find(|l| {
            l.starts_with("tlsscope_tls_handshakes_total{") && l.contains("outcome=\"success\"")
        })
        .unwrap_or_else(|| panic!("{exposition}"));
    assert!(line.ends_with(&format!(" {count}")), "{line}");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o644);
    serve.stop();
}

// Issue 16.
#[test]
fn bad_metrics_options_are_one_line_errors() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let pid = std::process::id().to_string();
    let out = support::tlsscope(&["trace", "-p", &pid, "--metrics-listen", &addr, "-d", "1s"]);
    support::assert_one_line_error(&out, &["--metrics-listen", &addr, "the port is taken"]);
    let out = support::tlsscope(&[
        "trace",
        "-p",
        &pid,
        "--metrics-listen",
        "localhost",
        "-d",
        "1s",
    ]);
    support::assert_one_line_error(&out, &["--metrics-listen", "give ADDR:PORT"]);
    let out = support::tlsscope(&[
        "trace",
        "-p",
        &pid,
        "--metrics-file",
        "/nonexistent/dir/t.prom",
        "-d",
        "1s",
    ]);
    support::assert_one_line_error(&out, &["--metrics-file", "/nonexistent/dir/t.prom"]);
}

// Issue 16.
#[test]
fn the_systemd_units_command_line_serves_metrics() {
    let _one = one_at_a_time();
    let unit =
        std::fs::read_to_string(support::workspace_path("deploy/tlsscope-trace.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/tlsscope"));
    let args: Vec<&str> = words.collect();

    // systemd reads the unit as it is, with tlsscope where the unit expects it.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("tlsscope-trace.service");
    let bin = support::bin();
    std::fs::write(
        &local,
        unit.replace("/usr/local/bin/tlsscope", bin.to_str().unwrap()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&local)
        .output()
        .expect("systemd-analyze");
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // Its command line, on a loopback port, while the built-in server (on the system's
    // libssl, which the unit traces) makes handshakes.
    let serve = Serve::start(&[]);
    // Port 0: trace says which port it got.
    let args: Vec<&str> = args
        .iter()
        .map(|a| {
            if a.starts_with("0.0.0.0:") {
                "127.0.0.1:0"
            } else {
                a
            }
        })
        .collect();
    let mut trace = support::start_until(
        Command::new(&bin).args(&args).stdout(Stdio::null()),
        "metrics at",
        Duration::from_secs(60),
    );
    let metrics = support::metrics_addr(trace.seen.last().unwrap());
    handshakes(&serve, 10);
    let (status, body) = http_get(metrics, "/metrics", "text/plain");
    support::terminate(&mut trace.child);
    let ended = trace.child.wait().unwrap();
    serve.stop();
    assert_eq!(status, 200, "{body}");
    assert!(ended.success(), "SIGTERM ends the service cleanly: {ended}");
    let handshakes: f64 = body
        .lines()
        .filter(|l| l.starts_with("tlsscope_tls_handshakes_total{") && l.contains("\"success\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert!(handshakes >= 11.0, "{body}");
}

// Issue 16.
#[test]
fn serve_metrics_count_what_the_server_counts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serve.prom");
    // Port 0: serve says which port it got.
    let serve = Serve::start(&[
        "--metrics-listen",
        "127.0.0.1:0",
        "--metrics-file",
        file.to_str().unwrap(),
    ]);
    let metrics = support::metrics_addr(&serve.stdout_line("metrics at"));
    handshakes(&serve, 20);
    let (status, body) = http_get(metrics, "/metrics", "text/plain");
    assert_eq!(status, 200, "{body}");
    let (ok, said) = promtool_check(&body);
    assert!(ok, "promtool check metrics: {said}\n{body}");
    // bench's 20 and its first connection: full TLS 1.3 handshakes.
    for line in [
        r#"tlsscope_server_handshakes_total{kind="full"} 21"#,
        r#"tlsscope_server_handshakes_by_version_total{tls_protocol_version="1.3"} 21"#,
    ] {
        assert!(body.contains(line), "{line}\n{body}");
    }
    let stats = serve.stop();
    assert_eq!(stats["handshakes"]["full"], 21);
    // The file holds the final counters, as promtool reads them.
    let text = std::fs::read_to_string(&file).unwrap();
    let (ok, said) = promtool_check(&text);
    assert!(ok, "{said}\n{text}");
    assert!(
        text.contains(r#"tlsscope_server_handshakes_total{kind="full"} 21"#),
        "{text}"
    );
}

// Issue 16.
#[test]
fn bench_serves_its_live_figures_as_metrics() {
    let serve = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let (file, json) = (dir.path().join("bench.prom"), dir.path().join("bench.json"));
    // Port 0: bench says which port it got.
    let mut bench = support::start_until(
        Command::new(support::bin())
            .args([
                "bench",
                &serve.addr.to_string(),
                "--mode",
                "keepalive",
                "-c",
                "2",
            ])
            .args(["-d", "3s", "--metrics-listen", "127.0.0.1:0"])
            .arg("--metrics-file")
            .arg(&file)
            .arg("--json")
            .arg(&json)
            .stdout(Stdio::null()),
        "metrics at",
        Duration::from_secs(60),
    );
    let metrics = support::metrics_addr(bench.seen.last().unwrap());
    // Mid-run: requests counted so far, and still counting.
    std::thread::sleep(Duration::from_millis(1500));
    let count = |body: &str| -> f64 {
        body.lines()
            .find(|l| l.starts_with("tlsscope_bench_operations_total{"))
            .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
            .unwrap_or_else(|| panic!("{body}"))
    };
    let (status, first) = http_get(metrics, "/metrics", "text/plain");
    assert_eq!(status, 200, "{first}");
    std::thread::sleep(Duration::from_millis(500));
    let (_, second) = http_get(metrics, "/metrics", "text/plain");
    assert!(
        count(&first) > 0.0 && count(&second) > count(&first),
        "{first}\n{second}"
    );
    assert!(promtool_check(&second).0, "{second}");
    assert!(bench.child.wait().unwrap().success());
    serve.stop();
    // The file has the final figures: the run's own count.
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        count(&text),
        doc["result"]["ops"].as_f64().unwrap(),
        "{text}"
    );
}
