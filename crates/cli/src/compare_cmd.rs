//! `tlsscope compare`: saved runs side by side, or `--matrix`, an experiment run across
//! library versions and configurations (`experiments::compare`). Both end in one
//! [`CompareDocument`], rendered as a terminal table, Markdown, a self-contained HTML page, and
//! JSON.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use experiments::compare::matrix::{self, Event, MatrixConfig};
use experiments::compare::worker::{self, WorkerSpec};
use model::compare::CompareDocument;

use crate::args::{
    ClientEngine, ClientWork, CompareArgs, CtxChoice, ExperimentChoice, HandshakeChoice,
    MatrixOptions, ServerChoice,
};

pub fn run(openssl: Option<&str>, a: &CompareArgs) -> anyhow::Result<ExitCode> {
    crate::output::one_on_stdout([&a.json, &a.markdown, &a.html])?;
    let signals = crate::signals::StopFlags::install()?;
    let doc = if a.matrix {
        if !a.files.is_empty() {
            crate::usage_bail!(
                "--matrix runs the experiment itself: drop the files, or drop --matrix to compare them"
            );
        }
        run_matrix(openssl, &a.m, a.profile.as_ref(), &signals.stop)?
    } else {
        if a.files.len() < 2 {
            crate::usage_bail!(
                "give two or more saved runs to compare (JSON from bench, trace or compare), or --matrix"
            );
        }
        let environment = experiments::environment::host(std::env::args().collect());
        experiments::compare::saved::load(
            &a.files,
            a.m.level,
            a.m.noise_threshold / 100.0,
            environment,
        )?
    };
    write_outputs(&doc, a)?;
    if signals.stop.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("tlsscope: stopped by a signal; the rounds before it are reported");
        return Ok(signals.exit_code(ExitCode::FAILURE));
    }
    Ok(exit_status(&doc))
}

/// Failure when a variant failed (said on stderr): the others are still reported.
pub(crate) fn exit_status(doc: &CompareDocument) -> ExitCode {
    let failed = doc.variants.iter().filter(|v| v.error.is_some()).count();
    if failed > 0 {
        eprintln!(
            "tlsscope: error: {failed} of {} failed (see the warnings); the others are reported",
            report::count(doc.variants.len() as u64, "variant")
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Runs the matrix, each round said on stderr as it goes.
/// `stop` (set by a signal handler) ends it after the round in progress.
pub(crate) fn run_matrix(
    openssl: Option<&str>,
    m: &MatrixOptions,
    profile: Option<&crate::output::OutputDir>,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<CompareDocument> {
    let profile = profile
        .map(|d| d.create().map(Path::to_path_buf))
        .transpose()?;
    let config = matrix_config(openssl, m, profile)?;
    let mut build = |library: &str| install_prefix(library);
    let mut events = |event: Event<'_>| match event {
        Event::Round { round, of, label } => {
            eprint!("tlsscope compare: round {round}/{of}: {label} ... ");
            let _ = std::io::stderr().flush();
        }
        Event::RoundDone(Ok(summary)) => eprintln!("{summary}"),
        Event::RoundDone(Err(_)) => eprintln!("failed"),
    };
    Ok(matrix::run(&config, &mut build, &mut events, stop)?)
}

/// The matrix's options, checked and typed.
fn matrix_config(
    openssl: Option<&str>,
    m: &MatrixOptions,
    profile: Option<std::path::PathBuf>,
) -> anyhow::Result<MatrixConfig> {
    experiments::wording::check_cpus("--server-cpu", &[m.server_cpu]).map_err(crate::UsageError)?;
    experiments::wording::check_cpus("--client-cpu", &[m.client_cpu]).map_err(crate::UsageError)?;
    let libraries: Vec<String> = openssl
        .unwrap_or("system")
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    let mut experiments: Vec<_> = m.experiment.iter().map(|e| e.typed()).collect();
    experiments.dedup();
    let load = m.experiment.contains(&ExperimentChoice::Load);
    if m.client_engine.contains(&ClientEngine::Rustls) && !load {
        crate::usage_bail!(
            "--client-engine rustls drives only the load experiment: add --experiment load"
        );
    }
    let through_server = load || m.experiment.contains(&ExperimentChoice::Pretransfer);
    if m.server.contains(&ServerChoice::Nginx) && !through_server {
        crate::usage_bail!(
            "--server nginx serves the pretransfer and load experiments, not engine (no server): add --experiment load or pretransfer"
        );
    }
    let mut servers: Vec<_> = m.server.iter().map(|s| s.typed()).collect();
    servers.dedup();
    let mut client_engines: Vec<_> = m.client_engine.iter().map(|e| e.typed()).collect();
    client_engines.dedup();
    let client_work = match (m.client_work, m.verify.on()) {
        (Some(ClientWork::Lean), true) => crate::usage_bail!(
            "--client-work lean does not check the server's signature, so it cannot verify the server either; add --verify off, or use --client-work full"
        ),
        (Some(ClientWork::Lean), false) if !client_engines.contains(&load::EngineKind::Rustls) => crate::usage_bail!(
            "--client-work lean: only the rustls client has a lean form; add --client-engine rustls, or drop --client-work"
        ),
        (given, verifies) => ClientWork::resolve(given, verifies),
    };
    Ok(MatrixConfig {
        exe: std::env::current_exe().context("finding the tlsscope executable")?,
        libraries,
        fixed: m.fixed_openssl.clone(),
        side: m.side.typed(),
        cert_types: m.cert_type.clone(),
        tls: m.tls.iter().map(|t| t.typed()).collect(),
        groups: m
            .groups
            .iter()
            .map(|g| {
                (g != "default")
                    .then(|| {
                        g.parse::<ossl::GroupList>()
                            .map(|_| g.clone())
                            .map_err(|e| anyhow::anyhow!("--groups {g}: {e}"))
                    })
                    .transpose()
            })
            .collect::<anyhow::Result<_>>()?,
        resumed: m
            .resume
            .iter()
            .map(|r| *r == HandshakeChoice::Resumed)
            .collect(),
        ctx_per_connection: m
            .ctx
            .iter()
            .map(|c| *c == CtxChoice::PerConnection)
            .collect(),
        experiments,
        count: m.count,
        repeat: m.repeat,
        warmup: m.warmup,
        verify: m.verify.on(),
        level: m.level,
        noise_threshold: m.noise_threshold / 100.0,
        calibrate_slower_pct: m.calibrate_slower.max(0.0),
        server_cpu: m.server_cpu,
        client_cpu: m.client_cpu,
        environment: experiments::environment::host(std::env::args().collect()),
        profile,
        servers,
        client_engines,
        client_work,
        connections: m.connections,
        baseline: m.baseline.typed(),
    })
}

/// Where a library is installed: a directory as given, a version from the cache (built first
/// if the cache does not have it yet); or why it cannot be had.
fn install_prefix(library: &str) -> Result<std::path::PathBuf, String> {
    if library.contains('/') {
        return Ok(std::path::PathBuf::from(library));
    }
    let cache = ossl_build::BuildCache::new(crate::openssl_cmd::cache_root());
    if let Some(b) = cache.find(library) {
        return Ok(b.prefix);
    }
    eprintln!("tlsscope compare: {library} is not built yet: building it");
    let jobs = host::online_cpus();
    crate::openssl_cmd::build(&[library.to_string()], None, jobs, false)
        .map_err(|e| format!("{library} did not build: {e:#}"))?;
    cache
        .find(library)
        .map(|b| b.prefix)
        .ok_or_else(|| format!("OpenSSL {library} was built but is not in the cache"))
}

/// `compare-worker SPEC`: one variant's worker. Each line "run" on stdin asks for a round,
/// answered by one JSON line on stdout; the end of stdin ends it. A worker that cannot start
/// answers its first request (or, with no request, at once) with a line holding only `error`,
/// and exits 1: the matrix reads those lines, never the text on stderr.
pub fn worker(
    library: anyhow::Result<ossl::LibrarySource>,
    spec_json: &str,
) -> anyhow::Result<ExitCode> {
    use std::io::BufRead as _;
    let set_up = worker_setup(library, spec_json)
        .and_then(|(lib, spec)| Ok(worker::Worker::new(lib, &spec)?));
    let mut w = match set_up {
        Ok(w) => w,
        Err(e) => {
            let failed = worker::WorkerResult::failed(crate::one_line(&e));
            crate::output::to_stdout(serde_json::to_string(&failed)? + "\n")?;
            return Ok(ExitCode::FAILURE);
        }
    };
    for line in std::io::stdin().lock().lines() {
        if line?.trim() != "run" {
            anyhow::bail!("compare-worker: expected \"run\" on stdin");
        }
        let result = w.batch();
        crate::output::to_stdout(serde_json::to_string(&result)? + "\n")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The library loaded, the spec read and the thread pinned.
fn worker_setup(
    library: anyhow::Result<ossl::LibrarySource>,
    spec_json: &str,
) -> anyhow::Result<(&'static ossl::Library, WorkerSpec)> {
    let lib = crate::library::load(&library?)?;
    let spec: WorkerSpec = serde_json::from_str(spec_json).context("reading the worker spec")?;
    if let Some(cpu) = spec.cpu {
        host::pin_current_thread(cpu).with_context(|| format!("pinning to CPU {cpu}"))?;
    }
    Ok((lib, spec))
}

/// The files first: a stdout that fails (full, closed) loses no file.
fn write_outputs(doc: &CompareDocument, a: &CompareArgs) -> anyhow::Result<()> {
    if let Some(out) = &a.json {
        out.write_with(|w| Ok(doc.write_json(w)?))?;
    }
    if let Some(out) = &a.markdown {
        out.write(report::compare::markdown(doc).as_bytes())?;
    }
    if let Some(out) = &a.html {
        let links = a
            .profile
            .as_ref()
            .map(|dir| profile_links(doc, &dir.path, out.path_or_dash()))
            .unwrap_or_default();
        let page = report::compare::html::page_with_profiles(doc, &links);
        out.write(page.as_bytes())?;
    }
    let on_stdout = [&a.json, &a.markdown, &a.html]
        .iter()
        .any(|o| o.as_ref().is_some_and(|o| o.is_stdout()));
    if on_stdout {
        return Ok(());
    }
    crate::output::to_stdout(report::compare::text(doc))
}

/// The flame graphs `--profile` wrote for each variant, as the HTML page at `page` links them.
fn profile_links(
    doc: &CompareDocument,
    dir: &Path,
    page: &Path,
) -> Vec<report::compare::html::ProfileLinks> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    doc.variants
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let stem = experiments::compare::matrix::file_stem(i, &v.label);
            let svg = format!("{stem}.svg");
            names.contains(&svg).then(|| {
                let diff = names
                    .iter()
                    .find(|n| n.starts_with(&format!("{stem}-vs-")) && n.ends_with(".svg"));
                report::compare::html::ProfileLinks {
                    label: v.label.clone(),
                    flamegraph: href(page, &dir.join(&svg)),
                    differential: diff.map(|d| href(page, &dir.join(d))),
                }
            })
        })
        .collect()
}

/// `target` as a link from the page: relative when it lies under the page's directory.
fn href(page: &Path, target: &Path) -> String {
    let absolute = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let base = page
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let target = absolute(target);
    match target.strip_prefix(absolute(base)) {
        Ok(relative) => relative.display().to_string(),
        Err(_) => format!("file://{}", target.display()),
    }
}
