//! The wire figures bench reports (bytes each way, the ClientHello's size and key shares,
//! HelloRetryRequests, round trips) against tshark's dissection of a loopback capture of the
//! same run, for both client engines; and compare of two saved runs showing them.
//!
//! tshark's side is worked out here from its records alone, the way `load::wire` defines the
//! figures: each side's TLS records (length + 5-byte header) up to its Finished. In TLS 1.2
//! those are the handshake (22) and change_cipher_spec (20) records; in TLS 1.3 also the
//! encrypted ones, which are the server's that precede the client's first encrypted record
//! (its Finished: the server sends nothing more before it), and that record itself.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::Value;

use crate::support::{self, text, Serve};

const HELLO_RETRY_RANDOM: &str =
    "cf:21:ad:74:e5:9a:61:11:be:1d:8c:02:1e:65:b8:91:c2:a2:11:16:7a:bb:8c:5e:07:9e:09:e2:c8:a8:33:9c";

/// A tshark capture of one port on the loopback interface: the server's TCP traffic, and the
/// UDP markers that show the capture is running and has written out everything before them.
pub(crate) struct Capture {
    child: Child,
    file: PathBuf,
    port: u16,
    markers: usize,
    _dir: tempfile::TempDir,
}

impl Capture {
    pub(crate) fn start(port: u16) -> Capture {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run.pcap");
        let watched = support::start_until(
            Command::new("tshark")
                .args(["-i", "lo", "-f", &format!("port {port}"), "-w"])
                .arg(&file),
            "Capturing on",
            Duration::from_secs(30),
        );
        let mut capture = Capture {
            child: watched.child,
            file,
            port,
            markers: 0,
            _dir: dir,
        };
        // dumpcap says "Capturing on" as it opens the interface, a moment before it keeps
        // packets: markers are sent until one is in the file.
        capture.mark_until_written();
        capture
    }

    /// Stops the capture and dissects it: one entry per TCP connection, in order.
    fn stop(self) -> Vec<Connection> {
        let (file, _dir) = self.finish();
        dissect(&file)
    }

    /// Stops the capture once a marker sent after the run is in the file, so every packet the
    /// run sent before it is too (a starved dumpcap still holds them in the kernel's ring, and
    /// would drop them if stopped): the capture file, and the directory that holds it.
    pub(crate) fn finish(mut self) -> (PathBuf, tempfile::TempDir) {
        self.mark_until_written();
        // SIGINT: tshark writes out what it holds and ends, as after Ctrl-C.
        // SAFETY: kill has no memory effects; the pid is our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let _ = self.child.wait();
        (self.file, self._dir)
    }

    /// Sends numbered UDP datagrams to the captured port (nothing listens there) until the
    /// capture file holds one of them: dumpcap writes its file out as it goes.
    fn mark_until_written(&mut self) {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let first = self.markers;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let marker = format!("{MARKER}{}", self.markers);
            self.markers += 1;
            socket
                .send_to(marker.as_bytes(), ("127.0.0.1", self.port))
                .unwrap();
            let poll_end = std::time::Instant::now() + Duration::from_millis(500);
            while std::time::Instant::now() < poll_end {
                std::thread::sleep(Duration::from_millis(50));
                if self.markers_written().iter().any(|&n| n >= first) {
                    return;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "tshark wrote no marker to {} in 60 s",
                self.file.display()
            );
        }
    }

    /// The numbers of the markers in the capture file so far (its last packet may be half
    /// written).
    fn markers_written(&self) -> Vec<usize> {
        let out = Command::new("tshark")
            .arg("-r")
            .arg(&self.file)
            .args(["-Y", "udp && !icmp", "-T", "fields", "-e", "data.data"])
            .output()
            .expect("run tshark");
        text(&out.stdout)
            .lines()
            .filter_map(|hex| {
                let bytes: Vec<u8> = (0..hex.len() / 2)
                    .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
                    .collect();
                String::from_utf8(bytes)
                    .ok()?
                    .strip_prefix(MARKER)?
                    .parse()
                    .ok()
            })
            .collect()
    }
}

/// What a capture marker's payload starts with; its number follows.
const MARKER: &str = "tlsscope-capture-marker-";

/// One TLS record as tshark saw it.
#[derive(Debug)]
struct Record {
    from_client: bool,
    /// The record's type on the wire (23 for TLS 1.3's encrypted records).
    outer_type: u64,
    bytes: u64,
    /// Its handshake messages (tshark's objects), when in clear.
    messages: Vec<Value>,
}

/// One connection's wire figures by tshark's account.
#[derive(Debug, Default, Clone, PartialEq)]
struct Connection {
    resumed: bool,
    client_bytes: u64,
    server_bytes: u64,
    client_hello_bytes: u64,
    key_shares: Vec<String>,
    /// The key shares' bytes (hex, as tshark gives them), in the ClientHello's order.
    key_exchange: Vec<String>,
    hello_retry: bool,
    round_trips: u64,
}

fn dissect(file: &Path) -> Vec<Connection> {
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(file)
        .args(["-Y", "tls", "-T", "json", "--no-duplicate-keys"])
        .output()
        .expect("run tshark");
    assert!(out.status.success(), "tshark: {}", text(&out.stderr));
    let frames: Vec<Value> = serde_json::from_slice(&out.stdout).expect("tshark JSON");
    let mut streams: std::collections::BTreeMap<u64, (u64, Vec<Record>)> = Default::default();
    for frame in &frames {
        let layers = &frame["_source"]["layers"];
        let tcp = &layers["tcp"];
        let stream: u64 = tcp["tcp.stream"].as_str().unwrap().parse().unwrap();
        let src: u64 = tcp["tcp.srcport"].as_str().unwrap().parse().unwrap();
        let dst: u64 = tcp["tcp.dstport"].as_str().unwrap().parse().unwrap();
        // The first frame of a stream is the client's (its ClientHello): the server's port is
        // the one it was sent to.
        let entry = streams.entry(stream).or_insert((dst, Vec::new()));
        let server_port = entry.0;
        for tls in as_list(&layers["tls"]) {
            for record in as_list(&tls["tls.record"]) {
                let outer = record
                    .get("tls.record.opaque_type")
                    .or_else(|| record.get("tls.record.content_type"))
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_else(|| panic!("record without a type: {record}"));
                let len: u64 = record["tls.record.length"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                entry.1.push(Record {
                    from_client: src != server_port,
                    outer_type: outer,
                    bytes: len + 5,
                    messages: as_list(&record["tls.handshake"]).cloned().collect(),
                });
            }
        }
    }
    streams.into_values().map(|(_, r)| connection(&r)).collect()
}

/// A value tshark gives once or as a list, as a list (none when absent).
fn as_list(v: &Value) -> impl Iterator<Item = &Value> {
    match v {
        Value::Array(a) => a.iter().collect::<Vec<_>>().into_iter(),
        Value::Null => Vec::new().into_iter(),
        one => vec![one].into_iter(),
    }
}

/// Every value of `key` anywhere inside `v`.
fn find_all<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == key {
                    out.extend(as_list(x));
                } else {
                    find_all(x, key, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| find_all(x, key, out)),
        _ => {}
    }
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    find_all(v, key, &mut out);
    out.iter()
        .map(|x| x.as_str().unwrap_or_default().to_string())
        .collect()
}

fn message_type(m: &Value) -> Option<u64> {
    m["tls.handshake.type"].as_str()?.parse().ok()
}

/// Names a group code point as `load::client_hello` does.
fn group_name(code: u16) -> String {
    load::client_hello::group_label(code)
}

fn connection(records: &[Record]) -> Connection {
    let messages = |from_client: bool| {
        records
            .iter()
            .filter(move |r| r.from_client == from_client)
            .flat_map(|r| r.messages.iter())
    };
    let server_hellos: Vec<&Value> = messages(false)
        .filter(|m| message_type(m) == Some(2))
        .collect();
    let is_hrr = |m: &Value| m["tls.handshake.random"].as_str() == Some(HELLO_RETRY_RANDOM);
    let hello_retry = server_hellos.iter().any(|m| is_hrr(m));
    let server_hello = server_hellos
        .iter()
        .find(|m| !is_hrr(m))
        .expect("a ServerHello");
    let tls13 = strings(server_hello, "tls.handshake.extensions.supported_version")
        .iter()
        .any(|v| v == "0x0304");
    let resumed = if tls13 {
        strings(server_hello, "tls.handshake.extension.type")
            .iter()
            .any(|t| t == "41")
    } else {
        !messages(false).any(|m| message_type(m) == Some(11))
    };
    // The records each figure counts (see the module's doc).
    let client_finished = records
        .iter()
        .position(|r| r.from_client && r.outer_type == 23);
    let counted: Vec<&Record> = records
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            if r.outer_type == 22 || r.outer_type == 20 {
                return true;
            }
            tls13 && r.outer_type == 23 && client_finished.is_some_and(|f| *i <= f)
        })
        .map(|(_, r)| r)
        .collect();
    let sum = |from_client: bool| -> u64 {
        counted
            .iter()
            .filter(|r| r.from_client == from_client)
            .map(|r| r.bytes)
            .sum()
    };
    let mut round_trips = 0;
    for pair in counted.windows(2) {
        if pair[0].from_client && !pair[1].from_client {
            round_trips += 1;
        }
    }
    let hello_record = records
        .iter()
        .find(|r| r.from_client && r.messages.iter().any(|m| message_type(m) == Some(1)))
        .expect("a ClientHello");
    let key_shares = strings(
        &Value::Array(hello_record.messages.clone()),
        "tls.handshake.extensions_key_share_group",
    )
    .iter()
    .map(|g| group_name(g.parse().unwrap()))
    .collect();
    let key_exchange = strings(
        &Value::Array(hello_record.messages.clone()),
        "tls.handshake.extensions_key_share_key_exchange",
    );
    Connection {
        resumed,
        key_exchange,
        client_bytes: sum(true),
        server_bytes: sum(false),
        client_hello_bytes: hello_record.bytes,
        key_shares,
        hello_retry,
        round_trips,
    }
}

/// Runs bench (`global` before the command), returns its JSON document and its text.
fn bench(global: &[&str], args: &[&str]) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = support::tlsscope(
        &[
            global,
            &["bench"],
            args,
            &["--json", json.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "bench {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    support::assert_matches_schema(&doc, "bench.v1");
    (doc, text(&out.stdout))
}

/// Sums tshark's connections of one kind as bench's `wire.<kind>` reports them.
fn expected(conns: &[&Connection]) -> Value {
    let total = |f: &dyn Fn(&Connection) -> u64| conns.iter().map(|c| f(c)).sum::<u64>();
    let mut sets: Vec<(Vec<String>, u64)> = Vec::new();
    for c in conns {
        match sets.iter_mut().find(|(g, _)| *g == c.key_shares) {
            Some((_, n)) => *n += 1,
            None => sets.push((c.key_shares.clone(), 1)),
        }
    }
    sets.sort_by_key(|s| std::cmp::Reverse(s.1));
    serde_json::json!({
        "handshakes": conns.len(),
        "client_bytes": total(&|c| c.client_bytes),
        "server_bytes": total(&|c| c.server_bytes),
        "client_hello_bytes": total(&|c| c.client_hello_bytes),
        "round_trips": total(&|c| c.round_trips),
        "hello_retry_requests": total(&|c| u64::from(c.hello_retry)),
        "key_shares": sets.iter().map(|(g, n)| serde_json::json!({
            "count": g.len(), "groups": g, "handshakes": n})).collect::<Vec<_>>(),
    })
}

/// What bench reported for one kind, in the shape of [`expected`].
fn reported(kind: &Value) -> Value {
    serde_json::json!({
        "handshakes": kind["handshakes"],
        "client_bytes": kind["client_bytes"]["total"],
        "server_bytes": kind["server_bytes"]["total"],
        "client_hello_bytes": kind["client_hello_bytes"]["total"],
        "round_trips": kind["round_trips"]["total"],
        "hello_retry_requests": kind["hello_retry_requests"],
        "key_shares": kind["key_shares"],
    })
}

/// Runs bench against `server` under a capture, and checks every wire figure against the
/// capture's; returns bench's wire summary and tshark's connections (the run's own).
fn run_and_compare(
    server: &Serve,
    global: &[&str],
    args: &[&str],
    what: &str,
) -> (Value, Vec<Connection>) {
    let capture = Capture::start(server.port());
    let addr = server.addr.to_string();
    let (doc, stdout) = bench(
        global,
        &[&[addr.as_str(), "-t", "1", "-c", "1"], args].concat(),
    );
    let mut conns = capture.stop();
    // bench checks the target with one connection of its own before the run.
    assert!(!conns.is_empty(), "{what}: nothing captured");
    conns.remove(0);
    let wire = doc["result"]["wire"].clone();
    assert!(wire.is_object(), "{what}: no wire figures: {doc}");
    let handshakes = &doc["result"]["handshakes"];
    assert_eq!(
        conns.len() as u64,
        handshakes["total"].as_u64().unwrap(),
        "{what}: every connection is one handshake"
    );
    for (kind, resumed) in [("full", false), ("resumed", true)] {
        let of_kind: Vec<&Connection> = conns.iter().filter(|c| c.resumed == resumed).collect();
        if of_kind.is_empty() {
            assert!(wire.get(kind).is_none(), "{what}: {kind}: {wire}");
            continue;
        }
        assert_eq!(
            reported(&wire[kind]),
            expected(&of_kind),
            "{what}: {kind} handshakes: bench (left) and tshark (right) differ"
        );
    }
    assert!(stdout.contains("  wire full "), "{what}: {stdout}");
    (wire, conns)
}

#[test]
fn wire_figures_of_both_engines_equal_tsharks_for_full_and_resumed_tls13_and_tls12() {
    let server = Serve::start(&[]);
    for engine in ["rustls", "openssl"] {
        for tls in ["1.3", "1.2"] {
            let what = format!("{engine} TLS {tls}");
            let e = ["--client-engine", engine, "--tls", tls];
            let (wire, conns) =
                run_and_compare(&server, &[], &[&e[..], &["-n", "4"]].concat(), &what);
            assert!(conns.iter().all(|c| !c.resumed), "{what}");
            let rt = wire["full"]["round_trips"]["max"].as_u64().unwrap();
            assert_eq!(rt, if tls == "1.3" { 1 } else { 2 }, "{what}: {wire}");
            let (wire, conns) = run_and_compare(
                &server,
                &[],
                &[&e[..], &["-n", "5", "--mode", "resume"]].concat(),
                &format!("{what} resumed"),
            );
            assert_eq!(conns.iter().filter(|c| c.resumed).count(), 4, "{what}");
            assert_eq!(wire["resumed"]["round_trips"]["max"], 1, "{what}: {wire}");
            // A resumed ClientHello carries the session: it is the larger one.
            assert!(
                wire["resumed"]["client_hello_bytes"]["min"].as_u64()
                    > wire["full"]["client_hello_bytes"]["max"].as_u64(),
                "{what}: {wire}"
            );
            let shares = &wire["full"]["key_shares"][0];
            if tls == "1.3" {
                assert_eq!(shares["groups"], serde_json::json!(["x25519"]), "{what}");
            } else {
                assert_eq!(
                    shares["count"], 0,
                    "{what}: a TLS 1.2-only hello has no key_share"
                );
            }
        }
    }
}

#[test]
fn a_hello_retry_request_is_counted_as_tshark_sees_it_by_both_engines() {
    let prefix = support::openssl_355().to_str().unwrap().to_string();
    // The server takes only P-256; both clients' first share is x25519 alone.
    let server = Serve::start_with(&["--openssl", &prefix], &["--groups", "secp256r1"]);
    for engine in ["rustls", "openssl"] {
        let what = format!("{engine} against a P-256-only server");
        let (wire, conns) = run_and_compare(
            &server,
            &[],
            &[
                "--client-engine",
                engine,
                "--groups",
                "x25519:secp256r1",
                "-n",
                "4",
                "--mode",
                "resume",
            ],
            &what,
        );
        // Every full handshake met a HelloRetryRequest and took one more round trip.
        assert!(
            conns.iter().filter(|c| !c.resumed).all(|c| c.hello_retry),
            "{what}"
        );
        assert_eq!(wire["full"]["hello_retry_requests"], 1, "{what}: {wire}");
        assert_eq!(wire["full"]["round_trips"]["max"], 2, "{what}: {wire}");
        assert_eq!(
            wire["full"]["key_shares"][0]["groups"],
            serde_json::json!(["x25519"]),
            "{what}"
        );
    }
}

#[test]
fn openssl_3_5_sends_two_key_shares_and_bench_counts_their_bytes_as_tshark_does() {
    let prefix = support::openssl_355().to_str().unwrap().to_string();
    let server = Serve::start_with(&["--openssl", &prefix], &[]);
    let global = ["--openssl", prefix.as_str()];
    let (wire, _) = run_and_compare(
        &server,
        &global,
        &["--client-engine", "openssl", "-n", "4", "--mode", "resume"],
        "OpenSSL 3.5.5 client",
    );
    let full = &wire["full"];
    assert_eq!(
        full["key_shares"][0]["groups"],
        serde_json::json!(["X25519MLKEM768", "x25519"]),
        "{wire}"
    );
    assert_eq!(full["key_shares"][0]["count"], 2);
    // The hybrid share (1,216 bytes) is in the ClientHello; the server answers with its own
    // (1,120 bytes).
    assert!(
        full["client_hello_bytes"]["min"].as_u64().unwrap() > 1216 + 32,
        "{wire}"
    );
    assert!(
        full["server_bytes"]["min"].as_u64().unwrap() > 1120,
        "{wire}"
    );
    assert_eq!(full["hello_retry_requests"], 0);
}

#[test]
fn compare_of_two_saved_runs_shows_their_wire_figures() {
    let server = Serve::start(&[]);
    let addr = server.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (name, tls) in [("tls13", "1.3"), ("tls12", "1.2")] {
        let path = dir.path().join(format!("{name}.json"));
        let out = support::tlsscope(&[
            "bench",
            &addr,
            "--tls",
            tls,
            "-n",
            "20",
            "--json",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        files.push(path);
    }
    let json = dir.path().join("compare.json");
    let out = support::tlsscope(&[
        "compare",
        files[0].to_str().unwrap(),
        files[1].to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    support::assert_matches_schema(&doc, "compare.v1");
    let variants = doc["variants"].as_array().unwrap();
    let client_bytes: Vec<u64> = variants
        .iter()
        .map(|v| {
            v["wire"]["full"]["client_bytes"]["per_handshake"]
                .as_f64()
                .unwrap() as u64
        })
        .collect();
    assert_eq!(client_bytes.len(), 2, "{doc}");
    for v in variants {
        let bytes = v["wire"]["full"]["server_bytes"]["per_handshake"]
            .as_f64()
            .unwrap();
        assert!(
            stdout.contains(&format!("server {bytes:.0} B")),
            "{bytes}: {stdout}"
        );
    }
    assert!(stdout.contains("round trips"), "{stdout}");
}

#[test]
fn handshake_reports_each_connections_wire_figures_as_tshark_sees_them() {
    let prefix = support::openssl_355().to_str().unwrap().to_string();
    let server = Serve::start(&[]);
    let capture = Capture::start(server.port());
    let out = support::tlsscope(&[
        "--openssl",
        &prefix,
        "handshake",
        &server.addr.to_string(),
        "-n",
        "3",
        "--resume",
        "--json",
        "-",
    ]);
    let conns = capture.stop();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(conns.len(), 3, "{conns:?}");
    for (line, c) in lines.iter().zip(&conns) {
        let w = &line["wire"];
        assert_eq!(line["resumed"], c.resumed, "{line}");
        assert_eq!(w["client_bytes"], c.client_bytes, "{line} {c:?}");
        assert_eq!(w["server_bytes"], c.server_bytes, "{line} {c:?}");
        assert_eq!(
            w["client_hello_bytes"], c.client_hello_bytes,
            "{line} {c:?}"
        );
        assert_eq!(
            w["key_share_groups"],
            serde_json::json!(c.key_shares),
            "{line}"
        );
        assert_eq!(w["hello_retry_request"], c.hello_retry, "{line}");
        assert_eq!(w["round_trips"], c.round_trips, "{line}");
    }
    // OpenSSL 3.5's default client offers the hybrid and x25519; a 3.0 server takes x25519.
    assert_eq!(conns[0].key_shares, ["X25519MLKEM768", "x25519"]);
}

#[test]
fn compare_matrix_reports_each_client_librarys_key_shares_and_bytes() {
    let prefix = support::openssl_355().to_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    let out = support::tlsscope(&[
        "--openssl",
        &format!("system,{prefix}"),
        "compare",
        "--matrix",
        "--experiment",
        "pretransfer",
        "-n",
        "5",
        "--repeat",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    support::assert_matches_schema(&doc, "compare.v1");
    let variants = doc["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 2);
    let full = |v: &Value| v["wire"]["full"].clone();
    let (system, v355) = (full(&variants[0]), full(&variants[1]));
    // Every measured connection of both rounds, none of the warm-up's.
    for (v, w) in variants.iter().zip([&system, &v355]) {
        let obtained: u64 = v["negotiated"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["count"].as_u64().unwrap())
            .sum();
        assert_eq!(w["handshakes"], obtained, "{v:#}");
        assert_eq!(w["round_trips"]["max"], 1, "{v:#}");
    }
    assert_eq!(
        system["key_shares"][0]["groups"],
        serde_json::json!(["x25519"])
    );
    assert_eq!(
        v355["key_shares"][0]["groups"],
        serde_json::json!(["X25519MLKEM768", "x25519"])
    );
    // The hybrid share (1,216 bytes, with its 4-byte entry header) is the difference.
    let hello = |w: &Value| w["client_hello_bytes"]["max"].as_u64().unwrap();
    assert!(hello(&v355) >= hello(&system) + 1216, "{system} {v355}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("on the wire"), "{stdout}");
    assert!(stdout.contains("X25519MLKEM768, x25519"), "{stdout}");
}

#[test]
fn compare_matrix_load_experiment_carries_bench_s_wire_figures_per_client_engine() {
    let prefix = support::openssl_355().to_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("l.json");
    let out = support::tlsscope(&[
        "--openssl",
        &format!("system,{prefix}"),
        "compare",
        "--matrix",
        "--side",
        "server",
        "--experiment",
        "load",
        "--client-engine",
        "rustls,openssl",
        "-n",
        "20",
        "--repeat",
        "2",
        "-c",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    support::assert_matches_schema(&doc, "compare.v1");
    let variants = doc["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 4, "{doc:#}");
    for v in variants {
        let full = &v["wire"]["full"];
        // The load experiment's own handshakes, both rounds, as bench counted them.
        let measured: u64 = v["negotiated"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["handshake"] == "full (load)")
            .map(|n| n["count"].as_u64().unwrap())
            .sum();
        assert_eq!(full["handshakes"], measured, "{v:#}");
        assert_eq!(full["round_trips"]["max"], 1, "{v:#}");
        // Both clients here are on ring or the system's 3.0: one x25519 share.
        assert_eq!(
            full["key_shares"][0]["groups"],
            serde_json::json!(["x25519"]),
            "{v:#}"
        );
    }
    assert!(stdout.contains("on the wire"), "{stdout}");
}

#[test]
fn an_openssl_1_1_1_client_counts_the_wire_as_tshark_does() {
    let prefix = support::openssl_111w().to_str().unwrap().to_string();
    let server = Serve::start(&[]);
    let global = ["--openssl", prefix.as_str()];
    for tls in ["1.3", "1.2"] {
        let (wire, _) = run_and_compare(
            &server,
            &global,
            &[
                "--client-engine",
                "openssl",
                "--tls",
                tls,
                "-n",
                "4",
                "--mode",
                "resume",
            ],
            &format!("OpenSSL 1.1.1w client, TLS {tls}"),
        );
        assert_eq!(wire["resumed"]["handshakes"], 3, "{wire}");
    }
}

#[test]
fn openssl_4_0_aws_lc_and_boringssl_clients_count_the_wire_as_tshark_does() {
    let server = Serve::start(&[]);
    for prefix in [
        support::openssl_403(),
        support::openssl_aws_lc(),
        support::openssl_boringssl(),
    ] {
        let prefix = prefix.to_str().unwrap();
        let (wire, _) = run_and_compare(
            &server,
            &["--openssl", prefix],
            &["--client-engine", "openssl", "-n", "4", "--mode", "resume"],
            &format!("client on {prefix}"),
        );
        assert_eq!(wire["full"]["handshakes"], 1, "{prefix}: {wire}");
        assert_eq!(wire["resumed"]["handshakes"], 3, "{prefix}: {wire}");
    }
}

#[test]
fn a_lean_client_offers_one_key_share_for_the_whole_run_and_a_full_client_a_new_one_each_time() {
    let prefix = support::openssl_355().to_str().unwrap().to_string();
    let server = Serve::start_with(&["--openssl", &prefix], &[]);
    for (work, groups) in [
        ("lean", "x25519"),
        ("full", "x25519"),
        ("lean", "X25519MLKEM768:x25519"),
        ("full", "X25519MLKEM768:x25519"),
    ] {
        let what = format!("{work} client, groups {groups}");
        let (wire, conns) = run_and_compare(
            &server,
            &[],
            &[
                "--client-work",
                work,
                "--groups",
                groups,
                "-n",
                "6",
                "--mode",
                "resume",
            ],
            &what,
        );
        assert_eq!(conns.len(), 6, "{what}");
        let shares = groups.split(':').count();
        assert!(
            conns.iter().all(|c| c.key_exchange.len() == shares),
            "{what}: {conns:?}"
        );
        let distinct: std::collections::BTreeSet<&Vec<String>> =
            conns.iter().map(|c| &c.key_exchange).collect();
        match work {
            // Full and resumed handshakes alike carry the same share.
            "lean" => assert_eq!(distinct.len(), 1, "{what}: {distinct:?}"),
            _ => assert_eq!(distinct.len(), conns.len(), "{what}: {distinct:?}"),
        }
        if shares == 2 {
            // The hybrid's X25519 half is the standalone share, as rustls sends it fresh.
            for c in &conns {
                let hybrid = c.key_exchange[0].replace(':', "");
                let alone = c.key_exchange[1].replace(':', "");
                assert!(hybrid.ends_with(&alone), "{what}: {c:?}");
            }
        }
        assert_eq!(wire["full"]["hello_retry_requests"], 0, "{what}");
    }
}
