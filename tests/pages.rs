//! Issue 16: the HTML reports, as a browser shows them: self-contained, every plot rendered,
//! nothing logged to the console.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{self, Serve};
use crate::trace::{one_at_a_time, Trace};

/// Three seconds of keep-alive requests on two connections.
const KEEPALIVE_3S: [&str; 6] = ["--mode", "keepalive", "-c", "2", "-d", "3s"];

/// Checks a page the way a person's browser would load it: nothing from the network, every
/// plot drawn, no console message; returns the number of plots.
pub fn assert_page_renders(page: &Path) -> usize {
    let html = std::fs::read_to_string(page).unwrap();
    for outside in ["src=\"http", "href=\"http", "<link", "@import"] {
        assert!(
            !html.contains(outside),
            "the page loads something: {outside}"
        );
    }
    let (dom, console) = support::chromium_page(page);
    assert!(console.is_empty(), "the page logged: {console:?}");
    let plots = support::body_attribute(&dom, "data-plots");
    let rendered = support::body_attribute(&dom, "data-plots-rendered");
    assert_eq!(rendered, plots, "{rendered} of {plots} plots rendered");
    plots
}

// Issue 16.
#[test]
fn trace_html_has_a_histogram_per_function_and_the_intervals() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let pid = serve.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("trace.html");
    let trace = Trace::start(&[
        "-p",
        &pid,
        "--probes",
        "handshake,io",
        "-i",
        "1s",
        "--html",
        html.to_str().unwrap(),
    ]);
    let load = Command::new(support::bin())
        .args(["bench", &serve.addr.to_string()])
        .args(KEEPALIVE_3S)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(load.success());
    let (ok, _stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    serve.stop();
    let plots = assert_page_renders(&html);
    // One histogram per function traced, and with -i the calls and the time per interval.
    let mut functions: Vec<&str> = doc["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    functions.dedup();
    assert!(functions.contains(&"SSL_read"), "{functions:?}");
    assert_eq!(plots, functions.len() + 2);
    let page = std::fs::read_to_string(&html).unwrap();
    for f in &functions {
        assert!(page.contains(&format!("<h3>{f}</h3>")), "{f}");
    }
    assert!(page.contains("calls per interval"));
}

// Issue 16.
#[test]
fn bench_html_has_throughput_per_second_and_latency_by_percentile() {
    let serve = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let (html, json) = (dir.path().join("bench.html"), dir.path().join("bench.json"));
    let addr = serve.addr.to_string();
    let mut args = vec!["bench", addr.as_str()];
    args.extend(KEEPALIVE_3S);
    args.extend([
        "--html",
        html.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    let out = support::tlsscope(&args);
    serve.stop();
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    // The engine kept each second: three of them, adding up to the run's operations.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    support::assert_matches_schema(&doc, "bench.v1");
    let seconds = doc["result"]["per_second"].as_array().unwrap();
    assert!((3..=4).contains(&seconds.len()), "{seconds:?}");
    let ops: u64 = seconds.iter().map(|s| s["ops"].as_u64().unwrap()).sum();
    assert_eq!(ops, doc["result"]["ops"].as_u64().unwrap());
    assert!(seconds[0]["ops"].as_u64().unwrap() > 0);
    assert_eq!(assert_page_renders(&html), 2);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("operations (and errors) completed in each second"));
    assert!(
        page.contains("99.9%") || page.contains("99%"),
        "percentile axis"
    );
}
