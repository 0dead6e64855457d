//! Issue 15: `tlsscope profile -p PID` samples a running process with Debian's perf (DWARF
//! unwinding) and writes a flame graph, folded stacks and a table of the costliest functions.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::peers::{Nginx, NginxOpts};
use crate::support::{self, text, Serve};

/// Full handshakes against `addr` for 8 s, longer than a profile runs (bench stops itself).
fn handshake_load(addr: std::net::SocketAddr) -> std::process::Child {
    Command::new(support::bin())
        .args(["bench", &addr.to_string(), "-c", "4", "-d", "8s"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("bench")
}

/// `tlsscope profile -p PID -d 2s -o DIR` (plus `extra`) while `handshake_load` runs against
/// `addr`: its output, the temporary directory and the output directory in it.
fn profile_under_load(
    pid: u32,
    addr: std::net::SocketAddr,
    extra: &[&str],
) -> (std::process::Output, tempfile::TempDir, std::path::PathBuf) {
    let mut load = handshake_load(addr);
    std::thread::sleep(Duration::from_millis(500));
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("profile");
    let pid = pid.to_string();
    let mut args = vec![
        "profile",
        "-p",
        &pid,
        "-d",
        "2s",
        "--out-dir",
        out_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = support::tlsscope(&args);
    let _ = load.wait();
    (out, dir, out_dir)
}

// Issue 15.
#[test]
fn profile_of_a_loaded_server_shows_its_handshakes_down_to_libcrypto() {
    let serve = Serve::start(&["--threads", "1"]);
    let pid = serve.pid().to_string();
    let (out, _dir, out_dir) = profile_under_load(serve.pid(), serve.addr, &["--top", "60"]);
    serve.stop();
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}{table}", text(&out.stderr));

    // The table: the environment, a summary line, then the costliest functions, the server's
    // handshake among them, reached through libssl into libcrypto's signing.
    let mut lines = table.lines();
    let environment = lines.next().unwrap();
    assert!(
        environment.starts_with("environment: kernel "),
        "{environment}"
    );
    for needle in ["perf version", "999 Hz", "libssl.so", "libcrypto.so"] {
        assert!(environment.contains(needle), "{needle}: {environment}");
    }
    let first = lines.next().unwrap();
    assert!(
        first.starts_with(&format!("tlsscope (pid {pid}): ")),
        "{first}"
    );
    assert!(first.contains(" samples, "), "{first}");
    assert!(
        table.contains("ossl::ssl::Ssl::do_handshake (tlsscope)"),
        "{table}"
    );
    assert!(
        table.contains("(libssl)") && table.contains("(libcrypto)"),
        "{table}"
    );
    assert_eq!(
        std::fs::read_to_string(out_dir.join("top.txt")).unwrap(),
        table
    );

    // Folded stacks: root first, a CPU-microsecond count last; the handshake's stacks reach a
    // signing call in libcrypto (RSA-2048, the server's default certificate).
    let folded = std::fs::read_to_string(out_dir.join("stacks.folded")).unwrap();
    assert!(
        folded.starts_with(&format!("# {environment}")),
        "the environment heads the folded stacks:\n{}",
        &folded[..folded.len().min(500)]
    );
    let mut total_us = 0;
    for line in folded.lines().filter(|l| !l.starts_with("# ")) {
        let (stack, us) = line.rsplit_once(' ').unwrap();
        total_us += us.parse::<u64>().unwrap_or_else(|_| panic!("{line}"));
        assert!(!stack.is_empty());
    }
    assert!(
        total_us > 100_000,
        "{total_us} us of samples in 2 s of a busy server"
    );
    assert!(
        folded
            .lines()
            .any(|l| l.contains("ossl::ssl::Ssl::do_handshake (tlsscope)")
                && l.contains("EVP_DigestSign")),
        "no handshake stack reaches EVP_DigestSign*:\n{}",
        &folded[..folded.len().min(3000)]
    );
    // OpenSSL 3's SSL_do_handshake ends in a jump to the state machine, so no sample catches
    // its frame: it is put back from the wrapper's call, between the wrapper and the library.
    assert!(
        folded.lines().any(|l| {
            let frames: Vec<&str> = l.split(';').collect();
            frames
                .iter()
                .position(|f| *f == "SSL_do_handshake (libssl)")
                .is_some_and(|i| {
                    // Called from the wrapper (or, unoptimized, its closure); signing under it.
                    i > 0
                        && frames[i - 1].starts_with("ossl::ssl::Ssl::do_handshake")
                        && frames[i + 1..]
                            .iter()
                            .any(|f| f.starts_with("EVP_DigestSign"))
                })
        }),
        "SSL_do_handshake is not on the signing stacks:\n{}",
        &folded[..folded.len().min(3000)]
    );
    assert!(
        table.contains("SSL_do_handshake (libssl)") && table.contains("frames put back"),
        "{table}"
    );
    // Per connection: perf counted the accepted connections while it sampled, and under a
    // load of full handshakes the handshake is most of each one's CPU.
    let (connections, each) = first
        .split("; ")
        .find_map(|part| {
            let (n, rest) = part.split_once(" connections, ")?;
            Some((
                n.parse::<u64>().ok()?,
                rest.strip_suffix(" CPU-us each")?.parse::<f64>().ok()?,
            ))
        })
        .unwrap_or_else(|| panic!("no connection count: {first}"));
    assert!(connections > 100, "{first}");
    assert!(table.contains("us/conn  self/conn"), "{table}");
    let handshake: f64 = table
        .lines()
        .find(|l| l.ends_with("  SSL_do_handshake (libssl)"))
        .and_then(|l| l.split_whitespace().nth(4)?.parse().ok())
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        handshake > each * 0.5 && handshake <= each,
        "SSL_do_handshake {handshake} of {each} CPU-us per connection:\n{table}"
    );

    // The flame graph: an SVG (inferno's) naming the same frames.
    let svg = std::fs::read_to_string(out_dir.join("flamegraph.svg")).unwrap();
    assert!(
        svg.starts_with("<?xml") && svg.contains("<svg"),
        "{}",
        &svg[..100]
    );
    assert!(svg.contains("ossl::ssl::Ssl::do_handshake (tlsscope)"));
    assert!(
        svg.contains(environment),
        "the environment in the SVG's notes"
    );
    assert!(out_dir.join("perf.data").exists());

    // The pprof file, as Go's pprof reads it (Go comes with this machine kind).
    let go = ["go", "/usr/local/go/bin/go"]
        .into_iter()
        .find(|g| {
            Command::new(g)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("go (for go tool pprof)");
    let pprof = support::run_with_timeout(
        Command::new(go)
            .args(["tool", "pprof", "-top", "-cum", "-nodecount=300"])
            .arg(out_dir.join("profile.pb")),
        Duration::from_secs(120),
    );
    let top = text(&pprof.stdout);
    assert!(pprof.status.success(), "{}{top}", text(&pprof.stderr));
    assert!(top.contains("Type: cpu"), "{top}");
    assert!(top.contains("ossl::ssl::Ssl::do_handshake"), "{top}");
    assert!(top.contains("[unknown in libcrypto]"), "{top}");
}

/// The frames of each folded stack that holds `function`, split (comments skipped).
fn stacks_with<'a>(folded: &'a str, function: &str) -> Vec<Vec<&'a str>> {
    folded
        .lines()
        .filter(|l| !l.starts_with("# ") && l.contains(function))
        .map(|l| l.rsplit_once(' ').unwrap().0.split(';').collect())
        .collect()
}

// Issue 15.
#[test]
fn profile_of_nginx_puts_ssl_do_handshake_back_from_its_plt_call() {
    // nginx calls SSL_do_handshake through its PLT; Debian's libssl jumps on from there, so
    // only the call instruction in ngx_ssl_handshake still names it.
    let nginx = Nginx::start(NginxOpts::default());
    let (out, _dir, out_dir) = profile_under_load(nginx.pid(), nginx.addr(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let folded = std::fs::read_to_string(out_dir.join("stacks.folded")).unwrap();
    // Every signing stack that reaches back to nginx's handshake (a stack can be cut short
    // when it is deeper than the copy of the stack taken with the sample).
    let signing: Vec<_> = stacks_with(&folded, "EVP_DigestSign")
        .into_iter()
        .filter(|f| f.contains(&"ngx_ssl_handshake (nginx)"))
        .collect();
    assert!(!signing.is_empty(), "no signing:\n{folded}");
    for frames in &signing {
        let i = frames
            .iter()
            .position(|f| *f == "SSL_do_handshake (libssl)")
            .unwrap_or_else(|| panic!("no SSL_do_handshake: {frames:?}"));
        assert_eq!(frames[i - 1], "ngx_ssl_handshake (nginx)", "{frames:?}");
        assert!(frames[i + 1].ends_with("(libssl)"), "{frames:?}");
    }
}

// Issue 15.
#[test]
fn profile_refuses_a_missing_process_and_an_idle_one_with_one_line() {
    let out = support::tlsscope(&["profile", "-p", "4194303", "-d", "1s"]);
    support::assert_one_line_error(&out, &["no process 4194303"]);
    // Not root (and perf_event_paranoid above 1, as Debian sets it): said before anything else.
    let out = support::run_with_timeout(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(support::bin())
            .args(["profile", "-p", "1"]),
        Duration::from_secs(30),
    );
    support::assert_one_line_error(&out, &["needs root", "perf_event_paranoid"]);

    // A process that uses no CPU gives no samples: said, not an empty report.
    let mut idle = Command::new("sleep").arg("30").spawn().unwrap();
    let out = support::tlsscope(&["profile", "-p", &idle.id().to_string(), "-d", "1s"]);
    let _ = idle.kill();
    let _ = idle.wait();
    support::assert_error_line(&out, &["no samples", "used no CPU"]);
}

// Issue 15.
#[test]
fn ctrl_c_ends_a_profile_early_and_keeps_what_was_sampled() {
    let serve = Serve::start(&["--threads", "1"]);
    let mut load = handshake_load(serve.addr);
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("p");
    let mut profile = Command::new(support::bin());
    profile.args([
        "profile",
        "-p",
        &serve.pid().to_string(),
        "-d",
        "60s",
        "--out-dir",
        out_dir.to_str().unwrap(),
    ]);
    profile.stdout(Stdio::null());
    let watched = support::start_until(
        &mut profile,
        "Ctrl-C to stop early",
        Duration::from_secs(30),
    );
    let mut child = watched.child;
    std::thread::sleep(Duration::from_secs(3));
    let started = std::time::Instant::now();
    // SAFETY: kill with the PID of a child this test started and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "profile did not stop after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = load.wait();
    serve.stop();
    assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED));
    let table = std::fs::read_to_string(out_dir.join("top.txt")).unwrap();
    assert!(table.contains(" samples, "), "{table}");
    assert!(out_dir.join("flamegraph.svg").exists());
}

/// CPU-us per operation of `function` in the variant columns of `profile.txt`, in order.
fn per_op(table: &str, function: &str) -> Vec<f64> {
    let line = table
        .lines()
        .find(|l| l.ends_with(&format!("  {function}")))
        .unwrap_or_else(|| panic!("{function} not in profile.txt:\n{table}"));
    line.split(" | ")
        .map(|cell| cell.split_whitespace().next().unwrap().parse().unwrap())
        .collect()
}

// Issue 15.
#[test]
fn compare_profile_finds_3_0_2s_method_store_walk_absent_from_1_1_1w() {
    let libs = format!(
        "{},{}",
        support::openssl_111w().display(),
        support::openssl_302().display()
    );
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("profiles");
    let json = dir.path().join("compare.json");
    let out = support::tlsscope(&[
        "--openssl",
        &libs,
        "compare",
        "--matrix",
        "--ctx",
        "per-connection",
        "--experiment",
        "pretransfer",
        "-n",
        "20",
        "--repeat",
        "2",
        "--profile",
        profiles.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--html",
        dir.path().join("compare.html").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = std::fs::read_to_string(profiles.join("profile.txt")).unwrap();
    // The environment first: kernel and sampler, then each variant's libraries.
    assert!(table.starts_with("# kernel "), "{table}");
    assert!(table.contains("DWARF stacks"), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with("# openssl=")
            && l.contains("1.1.1w")
            && l.contains("chunks of samples lost")),
        "{table}"
    );
    // 3.0.2's tail calls (SSL_CTX_new and more) are put back, and counted, over all rounds.
    assert!(
        table.lines().any(|l| l.starts_with("# openssl=")
            && l.contains("3.0.2")
            && l.contains(" frames put back")
            && !l.contains("; 0 frames put back")),
        "{table}"
    );
    // 3.0.2 walks its method store (ossl_sa_doall_arg) for each new context's decoders; 1.1.1w
    // has no such function.
    let walk = per_op(&table, "ossl_sa_doall_arg (libcrypto)");
    assert_eq!(walk[0], 0.0, "{table}");
    assert!(walk[1] > 100.0, "{table}");
    // The profile's CPU per connection agrees with compare's own measure within 20%.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // "  <label>: N operations, X CPU-us each", one line per variant.
    let root: Vec<f64> = table
        .lines()
        .filter_map(|l| {
            l.strip_suffix(" CPU-us each")?
                .rsplit_once(", ")?
                .1
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(root.len(), 2, "{table}");
    for (i, v) in doc["variants"].as_array().unwrap().iter().enumerate() {
        let measured: Vec<f64> = v["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "client_cpu_per_connection")
            .unwrap()["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let mean = measured.iter().sum::<f64>() / measured.len() as f64;
        let ratio = root[i] / mean;
        assert!(
            (0.8..=1.2).contains(&ratio),
            "variant {i}: profile {} us against {mean} us per connection",
            root[i]
        );
    }
    // Per variant: flame graph, folded stacks, pprof; the second against the first.
    let names: Vec<String> = std::fs::read_dir(&profiles)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for suffix in [".svg", ".folded", ".pb"] {
        assert_eq!(
            names
                .iter()
                .filter(|n| n.ends_with(suffix) && !n.contains("-vs-"))
                .count(),
            2,
            "{names:?}"
        );
    }
    let diff = names
        .iter()
        .find(|n| n.ends_with("-vs-1.svg"))
        .expect("differential flame graph");
    let svg = std::fs::read_to_string(profiles.join(diff)).unwrap();
    assert!(svg.contains("ossl_sa_doall_arg (libcrypto)"));
    // Among the diff's top entries, and under SSL_CTX_new: 3.0.2's SSL_CTX_new jumps to
    // SSL_CTX_new_ex, so its frame is one put back from tlsscope's call.
    let rank = table
        .lines()
        .filter(|l| l.contains(" | "))
        .position(|l| l.ends_with("ossl_sa_doall_arg (libcrypto)"))
        .expect("ossl_sa_doall_arg in the diff");
    assert!(rank < 40, "row {rank} of the diff:\n{table}");
    let second = names
        .iter()
        .find(|n| n.starts_with("2-") && n.ends_with(".folded"))
        .unwrap();
    let folded = std::fs::read_to_string(profiles.join(second)).unwrap();
    assert!(folded.starts_with("# kernel "), "{}", &folded[..200]);
    assert!(
        folded.lines().any(|l| l.contains(
            "ossl::context::ContextBuilder::new (tlsscope);SSL_CTX_new (libssl);SSL_CTX_new_ex (libssl);"
        ) && l.contains("ossl_sa_doall_arg (libcrypto)")),
        "no method-store walk under SSL_CTX_new:\n{}",
        &folded[..folded.len().min(3000)]
    );
    // Both kinds render in a browser: Chromium parses them as SVG (a malformed one gives its
    // XML error page) and keeps every frame's name.
    for name in [
        diff.as_str(),
        names
            .iter()
            .find(|n| n.starts_with("2-") && n.ends_with(".svg") && !n.contains("-vs-"))
            .unwrap(),
    ] {
        let dom = support::chromium_dom(&profiles.join(name));
        assert!(
            dom.contains("<svg") && dom.contains("ossl_sa_doall_arg (libcrypto)"),
            "{name}: {}",
            &dom[..dom.len().min(500)]
        );
        assert!(
            !dom.contains("This page contains the following errors"),
            "{name}: {dom}"
        );
    }
    // The HTML report shows them: each variant's flame graph and the second's difference,
    // linked relative to the page, all loaded.
    let dom = support::chromium_dom(&dir.path().join("compare.html"));
    assert!(dom.contains("src=\"profiles/1-"), "{dom}");
    assert!(dom.contains("-vs-1.svg\""), "{dom}");
    assert!(dom.contains("data-flames=\"3\""), "{dom}");
    assert!(dom.contains("data-flames-loaded=\"3\""), "{dom}");
}

// Issue 15.
#[test]
fn profile_matrix_is_compare_profile_by_its_own_name() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("m");
    let out = support::tlsscope(&[
        "profile",
        "--matrix",
        "--experiment",
        "engine",
        "-n",
        "20",
        "--repeat",
        "1",
        "--out-dir",
        out_dir.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    assert!(stdout.contains("engine_handshake"), "{stdout}");
    assert!(
        stdout.contains("CPU-us per operation, total (self)"),
        "{stdout}"
    );
    assert!(stdout.contains("openssl=system: 20 operations"), "{stdout}");
    for file in [
        "compare.json",
        "profile.txt",
        "1-openssl=system.svg",
        "1-openssl=system.pb",
    ] {
        assert!(out_dir.join(file).exists(), "{file} missing");
    }

    let out = support::tlsscope(&["profile", "--matrix"]);
    support::assert_one_line_error(&out, &["missing --out-dir"]);
    let out = support::tlsscope(&["profile", "-p", "1", "--matrix", "--out-dir", "x"]);
    support::assert_one_line_error(&out, &["--pid", "--matrix"]);
    let out = support::tlsscope(&["profile", "--matrix", "--out-dir", "x", "-d", "3s"]);
    support::assert_one_line_error(&out, &["--matrix", "--duration"]);
}

/// Issue 31: a profile of the built-in server on `prefix` (OpenSSL 4.0.3, AWS-LC or BoringSSL)
/// under full handshakes finds the library's files in the process (`file`: `libssl.so.4`, or
/// the unversioned CMake name) and names the library's own functions on the handshake's path.
fn a_profile_names_the_flavour_s_own_functions(
    prefix: &std::path::Path,
    file: &str,
    names: &[&str],
) {
    let serve = Serve::start_with(
        &["--openssl", prefix.to_str().unwrap()],
        &["--threads", "1"],
    );
    let (out, _dir, _out_dir) = profile_under_load(serve.pid(), serve.addr, &["--top", "80"]);
    serve.stop();
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}{table}", text(&out.stderr));
    let environment = table.lines().next().unwrap();
    assert!(
        environment.contains(&format!("{}/lib/{file}", prefix.display())),
        "{environment}"
    );
    for name in ["SSL_do_handshake (libssl)"].iter().chain(names) {
        assert!(table.contains(name), "{name}:\n{table}");
    }
}

#[test]
fn a_profile_of_an_openssl_403_server_names_its_own_functions() {
    a_profile_names_the_flavour_s_own_functions(
        support::openssl_403(),
        "libssl.so.4",
        &[
            "tls_construct_cert_verify (libssl)",
            "rsa_ossl_private_encrypt (libcrypto)",
        ],
    );
}

#[test]
fn a_profile_of_an_aws_lc_server_names_its_own_functions() {
    a_profile_names_the_flavour_s_own_functions(
        support::openssl_aws_lc(),
        "libssl.so",
        &[
            "bssl::tls13_server_handshake (libssl)",
            "RSA_sign_pss_mgf1 (libcrypto)",
        ],
    );
}

#[test]
fn a_profile_of_a_boringssl_server_names_its_own_functions() {
    a_profile_names_the_flavour_s_own_functions(
        support::openssl_boringssl(),
        "libssl.so",
        &[
            "bssl::tls13_server_handshake (libssl)",
            "RSA_sign_pss_mgf1 (libcrypto)",
        ],
    );
}
