//! `compare --matrix`: the variants (the product of every list given), the servers and builds
//! they need, and the rounds, interleaved (A B C A B C ...) so drift in the machine does not
//! favour one variant.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, Context as _};
use report::compare::{CompareDocument, Experiment, Metric, Negotiated, Variant};

use super::worker::{WorkerResult, WorkerSpec};
use crate::args::{CompareArgs, Side};
use experiments::servers::{start_builtin, Builtin, ServerProcess};

/// The system's CA bundle: what curl loads into each of its contexts on Debian.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// One variant to measure.
#[derive(Clone, Debug)]
struct Plan {
    label: String,
    settings: BTreeMap<String, String>,
    /// The client's and the server's library (None: the system's).
    client_openssl: Option<String>,
    server_openssl: Option<String>,
    cert: String,
    tls: Option<String>,
    groups: Option<String>,
    resume: bool,
    per_connection: bool,
}

/// What a variant has gathered so far.
#[derive(Default)]
struct Gathered {
    library: Option<String>,
    samples: BTreeMap<String, Vec<f64>>,
    negotiated: Vec<Negotiated>,
    error: Option<String>,
}

/// `--openssl` values: a version, a directory, or "system".
fn library_choice(v: &str) -> Option<String> {
    (v != "system").then(|| v.to_string())
}

/// Every combination of the lists, labelled by the settings that vary.
fn plans(openssl: &[String], a: &CompareArgs) -> anyhow::Result<Vec<Plan>> {
    let fixed = a.fixed_openssl.as_deref().and_then(library_choice);
    let dims: [(&str, Vec<String>); 6] = [
        ("openssl", openssl.to_vec()),
        ("cert", a.cert_type.clone()),
        ("tls", a.tls.clone()),
        ("group", a.groups.clone()),
        ("resume", a.resume.clone()),
        ("ctx", a.ctx.clone()),
    ];
    for (name, values) in &dims {
        if values.is_empty() {
            anyhow::bail!("--{name}: give at least one value");
        }
    }
    let mut combos: Vec<Vec<(&str, String)>> = vec![Vec::new()];
    for (name, values) in &dims {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((*name, v.clone()));
                    c
                })
            })
            .collect();
    }
    let mut plans = Vec::new();
    for combo in combos {
        let get = |k: &str| {
            combo
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let varying: Vec<String> = combo
            .iter()
            .filter(|(n, _)| dims.iter().any(|(d, vals)| d == n && vals.len() > 1))
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        let label = if varying.is_empty() {
            format!("openssl={}", get("openssl"))
        } else {
            varying.join(" ")
        };
        let lib = library_choice(&get("openssl"));
        let (client_openssl, server_openssl) = match a.side {
            Side::Client => (lib, fixed.clone()),
            Side::Server => (fixed.clone(), lib),
            Side::Both => (lib.clone(), lib),
        };
        let resume = match get("resume").as_str() {
            "full" | "off" => false,
            "resumed" | "on" => true,
            other => anyhow::bail!("--handshakes {other}: use full or resumed"),
        };
        let per_connection = match get("ctx").as_str() {
            "shared" => false,
            "per-connection" => true,
            other => anyhow::bail!("--ctx {other}: use shared or per-connection"),
        };
        let tls = match get("tls").as_str() {
            "any" => None,
            v @ ("1.2" | "1.3") => Some(v.to_string()),
            other => anyhow::bail!("--tls-versions {other}: use 1.2, 1.3 or any"),
        };
        let group = get("group");
        let cert = get("cert");
        cert.parse::<ossl::CertType>()
            .map_err(|e| anyhow!("--cert-type: {e}"))?;
        plans.push(Plan {
            label,
            settings: combo
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect(),
            client_openssl,
            server_openssl,
            cert,
            tls,
            groups: (group != "default").then_some(group),
            resume,
            per_connection,
        });
    }
    Ok(plans)
}

/// Builds the versions not in the cache yet; returns the ones that failed, with why.
fn ensure_built(plans: &[Plan]) -> BTreeMap<String, String> {
    let cache = ossl::build::BuildCache::new(crate::openssl_cmd::cache_root());
    let mut failed = BTreeMap::new();
    let mut wanted: Vec<&String> = Vec::new();
    for p in plans {
        for v in [&p.client_openssl, &p.server_openssl].into_iter().flatten() {
            if !v.contains('/') && !wanted.contains(&v) {
                wanted.push(v);
            }
        }
    }
    for v in wanted {
        if cache.find(v).is_some() {
            continue;
        }
        eprintln!("tlsscope compare: OpenSSL {v} is not built yet: building it");
        let jobs = host::online_cpus();
        if let Err(e) = crate::openssl_cmd::build(std::slice::from_ref(v), None, jobs, false) {
            failed.insert(v.clone(), format!("OpenSSL {v} did not build: {e:#}"));
        }
    }
    failed
}

/// A server's library (None: the system's) and certificate type.
type ServerKey = (Option<String>, String);

/// A running server for one (library, certificate), and the CA file that trusts it.
struct Server {
    process: ServerProcess,
    cafile: PathBuf,
}

fn start_server(
    openssl: Option<&str>,
    cert: &str,
    cpu: usize,
    dir: &Path,
    index: usize,
) -> anyhow::Result<Server> {
    let cert_out = dir.join(format!("server-{index}.pem"));
    let exe = std::env::current_exe().context("finding the tlsscope executable")?;
    let process = start_builtin(&Builtin {
        exe: &exe,
        openssl,
        cert_type: cert
            .parse()
            .map_err(|e: ossl::UnknownCertType| anyhow!("{e}"))?,
        cpu,
        extra: &["--cert-out", cert_out.to_str().unwrap_or_default()],
    })?;
    let mut pem = std::fs::read(SYSTEM_BUNDLE).unwrap_or_default();
    pem.extend_from_slice(&std::fs::read(&cert_out).context("reading the server's certificate")?);
    let cafile = dir.join(format!("ca-{index}.pem"));
    std::fs::write(&cafile, pem)?;
    Ok(Server { process, cafile })
}

/// Runs the matrix and returns the document (variants that failed included, with why).
pub fn run(openssl: &[String], a: &CompareArgs, level: f64) -> anyhow::Result<CompareDocument> {
    let plans = plans(openssl, a)?;
    let experiments = a.experiment.clone();
    let pretransfer = experiments.iter().any(|e| e == "pretransfer");
    for e in &experiments {
        anyhow::ensure!(
            e == "pretransfer" || e == "engine",
            "--experiment {e}: use pretransfer, engine, or both"
        );
    }
    let build_failures = ensure_built(&plans);
    let dir = tempfile::tempdir()?;
    let mut servers: Vec<(ServerKey, Result<Server, String>)> = Vec::new();
    let mut gathered: Vec<Gathered> = plans.iter().map(|_| Gathered::default()).collect();
    for (p, g) in plans.iter().zip(gathered.iter_mut()) {
        let broken = [&p.client_openssl, &p.server_openssl]
            .into_iter()
            .flatten()
            .find_map(|v| build_failures.get(v));
        if let Some(why) = broken {
            g.error = Some(why.clone());
            continue;
        }
        let key = (p.server_openssl.clone(), p.cert.clone());
        if pretransfer && !servers.iter().any(|(k, _)| *k == key) {
            let index = servers.len();
            let s = start_server(key.0.as_deref(), &key.1, a.server_cpu, dir.path(), index)
                .map_err(|e| format!("the server did not start: {e:#}"));
            servers.push((key, s));
        }
    }
    let exe = std::env::current_exe().context("finding the tlsscope executable")?;
    for round in 0..a.repeat {
        for (i, p) in plans.iter().enumerate() {
            if gathered[i].error.is_some() {
                continue;
            }
            let server = servers
                .iter()
                .find(|(k, _)| k.0 == p.server_openssl && k.1 == p.cert)
                .map(|(_, s)| s);
            let server = match server {
                Some(Err(why)) => {
                    gathered[i].error = Some(why.clone());
                    continue;
                }
                Some(Ok(s)) => Some(s),
                None => None,
            };
            let spec = WorkerSpec {
                experiments: experiments.clone(),
                count: a.count,
                warmup: a.warmup,
                target: server.map(|s| s.process.addr),
                cafile: match (a.verify.on(), server) {
                    (true, Some(s)) => Some(s.cafile.clone()),
                    (true, None) => Some(PathBuf::from(SYSTEM_BUNDLE)),
                    (false, _) => None,
                },
                system_bundle: Path::new(SYSTEM_BUNDLE)
                    .exists()
                    .then(|| PathBuf::from(SYSTEM_BUNDLE)),
                tls: p.tls.clone(),
                groups: p.groups.clone(),
                resume: p.resume,
                ctx_per_connection: p.per_connection,
                cert_type: p.cert.clone(),
                cpu: Some(a.client_cpu),
            };
            eprint!(
                "tlsscope compare: round {}/{}: {} ... ",
                round + 1,
                a.repeat,
                p.label
            );
            let _ = std::io::stderr().flush();
            let server_cpu_before = server.and_then(|s| host::proc_cpu_s(s.process.pid()));
            let outcome = run_worker(&exe, p.client_openssl.as_deref(), &spec);
            let server_cpu_after = server.and_then(|s| host::proc_cpu_s(s.process.pid()));
            let g = &mut gathered[i];
            match outcome {
                Ok(r) => {
                    eprintln!("{}", one_line(&r));
                    if let (Some(b), Some(e)) = (server_cpu_before, server_cpu_after) {
                        if r.connections > 0 {
                            let cpu = (e.0 - b.0) + (e.1 - b.1);
                            g.samples
                                .entry("server_cpu_per_connection".into())
                                .or_default()
                                .push(cpu * 1e6 / r.connections as f64);
                        }
                    }
                    merge(g, r);
                }
                Err(e) => {
                    eprintln!("failed");
                    g.error = Some(format!("{e:#}"));
                }
            }
        }
    }
    drop(servers);
    Ok(document(&plans, gathered, a, level))
}

/// Runs one worker process and reads its result line.
fn run_worker(
    exe: &Path,
    openssl: Option<&str>,
    spec: &WorkerSpec,
) -> anyhow::Result<WorkerResult> {
    let mut cmd = Command::new(exe);
    if let Some(o) = openssl {
        cmd.args(["--openssl", o]);
    }
    let out = cmd
        .arg("compare-worker")
        .arg(serde_json::to_string(spec)?)
        .stdin(Stdio::null())
        .output()
        .context("starting a compare worker")?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stderr
            .lines()
            .last()
            .unwrap_or("")
            .trim_start_matches("tlsscope: error: ");
        anyhow::bail!("{line} ({})", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let r: WorkerResult = serde_json::from_str(text.trim()).context("reading a worker's result")?;
    if let Some(e) = &r.error {
        anyhow::bail!("{e}");
    }
    Ok(r)
}

/// "pretransfer median 12.3ms, engine median 4.1ms".
fn one_line(r: &WorkerResult) -> String {
    let parts: Vec<String> = ["pretransfer", "engine_handshake"]
        .iter()
        .filter_map(|name| {
            let s = r.samples.get(*name)?;
            Some(format!(
                "{name} median {}",
                report::duration(stats::compare::describe(s).median)
            ))
        })
        .collect();
    parts.join(", ")
}

fn merge(g: &mut Gathered, r: WorkerResult) {
    g.library = Some(r.library);
    for (name, values) in r.samples {
        g.samples.entry(name).or_default().extend(values);
    }
    for n in r.negotiated {
        Negotiated::tally(&mut g.negotiated, n);
    }
}

/// Metric order in reports.
const METRICS: &[&str] = &[
    "pretransfer",
    "request_total",
    "engine_handshake",
    "engine_client",
    "engine_server",
    "client_cpu_per_connection",
    "server_cpu_per_connection",
];

fn document(
    plans: &[Plan],
    gathered: Vec<Gathered>,
    a: &CompareArgs,
    level: f64,
) -> CompareDocument {
    let mut warnings = Vec::new();
    let variants: Vec<Variant> = plans
        .iter()
        .zip(gathered)
        .map(|(p, mut g)| {
            if let Some(e) = &g.error {
                warnings.push(format!("{}: {e}", p.label));
                g.negotiated.clear();
            }
            let metrics = if g.error.is_some() {
                Vec::new()
            } else {
                METRICS
                    .iter()
                    .filter_map(|name| {
                        let samples = g.samples.remove(*name)?;
                        Some(Metric::new(name, "us", true, samples, level))
                    })
                    .collect()
            };
            let mut settings = p.settings.clone();
            settings.insert(
                "client library".into(),
                p.client_openssl.clone().unwrap_or_else(|| "system".into()),
            );
            settings.insert(
                "server library".into(),
                p.server_openssl.clone().unwrap_or_else(|| "system".into()),
            );
            Variant {
                label: p.label.clone(),
                settings,
                library: g.library,
                error: g.error,
                metrics,
                negotiated: g.negotiated,
            }
        })
        .collect();
    if a.experiment.iter().any(|e| e == "engine") && a.side != Side::Both {
        warnings.push(
            "the in-process engine runs client and server in one process, so both use the variant's library whatever --side says".into(),
        );
    }
    let comparisons = report::compare::analyze(&variants, level);
    CompareDocument {
        schema_version: report::compare::COMPARE_SCHEMA_VERSION,
        kind: "compare".into(),
        environment: crate::environment::host(),
        experiment: Experiment {
            source: "matrix".into(),
            side: Some(a.side.name().into()),
            count: Some(a.count),
            repeat: Some(a.repeat),
            target: Some(
                "the built-in server (tlsscope serve), one per library and certificate".into(),
            ),
            files: Vec::new(),
        },
        level,
        variants,
        comparisons,
        warnings,
    }
}
