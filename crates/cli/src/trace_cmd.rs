//! `tlsscope trace`: attach the latency probes, read the kernel's histograms every interval and
//! at the end, print them, and detach on every way out.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use experiments::trace;
use probes::{Buckets, Selection, Target, Threads, TraceConfig};
use report::trace::{trace_footer, trace_text};

use crate::args::TraceArgs;
use crate::signals::StopFlags;

/// Calls of tlsscope's own function used to measure the cost of a probed call.
const CALIBRATION_CALLS: u64 = 20_000;

/// How long a command tlsscope started has to exit after SIGTERM when the trace ends.
const CHILD_GRACE: Duration = Duration::from_secs(10);

/// How often the targets' process tree is read for children forked since the start (a read of
/// every /proc/PID/stat).
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

pub fn run(a: &TraceArgs) -> anyhow::Result<ExitCode> {
    // The metrics options first: a taken port or an unwritable file is found before anything
    // is attached or started.
    let text_to_stdout = !crate::output::one_on_stdout([&a.json, &a.html])?;
    let mut exporter =
        experiments::metrics::Exporter::bind(a.metrics.metrics_listen, a.metrics.file())?;
    let targets = if a.command.is_empty() {
        probes::latency::check_can_trace()?;
        targets_of(&a.target, "trace")?
    } else {
        with_command(&a.target)?;
        anyhow::ensure!(
            !a.attach_all,
            "--attach-all attaches in every process: a command (after --) is traced in its own processes only; leave one out"
        );
        Vec::new()
    };
    let config = TraceConfig {
        threads: threads_of(&a.target),
        buckets: a.linear.unwrap_or(Buckets::Log2),
        per_pid: a.per_pid,
        attach_all: a.attach_all,
    };
    let request = trace::Request {
        targets,
        command: &a.command,
        backend: a.backend,
        selection: Selection::Latency {
            groups: a.probes,
            only: a.functions.clone(),
            exact: a.exact_outcomes,
        },
        config: config.clone(),
        placement: a.placement,
        calibration_calls: CALIBRATION_CALLS,
    };
    let signals = StopFlags::install()?;
    let stop = signals.stop.clone();
    let mut session = trace::start(&request)?;
    for note in &session.notes {
        eprintln!("tlsscope trace: {note}");
    }
    let tracer = &*session.tracer;
    let started = Instant::now();
    eprintln!(
        "tlsscope trace: {} {} ({}, {} backend); {}",
        report::count(trace::function_count(tracer.attached()) as u64, "function"),
        match tracer.backend() {
            probes::Backend::Kernel =>
                format!("attached in {}", trace::file_names(tracer.attached())),
            probes::Backend::User => "wrapped in process".to_string(),
        },
        session.targets.join(", "),
        tracer.backend().name(),
        match a.duration {
            Some(d) => format!("for {:.1} s, Ctrl-C to stop early", d.as_secs_f64()),
            None => "Ctrl-C to stop".to_string(),
        }
    );
    for m in tracer.not_attached() {
        eprintln!(
            "tlsscope trace: not traced: {} in {}: {}",
            m.function,
            m.path.display(),
            experiments::wording::missing_reason(&m.reason)
        );
    }
    if let Some(note) = trace::syscall_hooks_note(tracer) {
        eprintln!("tlsscope trace: {note}");
    }

    // Fault injection for the tests: a panic while the probes are attached must still detach
    // them (the tracer's Drop runs as the panic unwinds).
    if std::env::var_os("TLSSCOPE_TEST_PANIC_WHILE_TRACING").is_some() {
        panic!("TLSSCOPE_TEST_PANIC_WHILE_TRACING is set");
    }
    let watched = trace::watched_pids(session.child.as_ref(), &a.target.pids);
    let until = trace::Until {
        duration: a.duration,
        pids: &watched,
        stop: &stop,
    };
    let buckets = config.buckets;
    let cost = tracer.calibration().map_or(0.0, |c| c.cost_ns_per_call());
    let libraries = trace::metric_libraries(tracer);
    let mut render = |format: report::metrics::Format| {
        let snapshot = tracer.snapshot().map_err(|e| e.to_string())?;
        let m = trace::metrics(&snapshot, buckets, tracer, cost, &libraries);
        Ok(report::metrics::exposition(&m, format))
    };
    if let Some(addr) = exporter.addr() {
        eprintln!("tlsscope trace: metrics at http://{addr}/metrics");
    }
    let mut intervals: Vec<model::trace::Interval> = Vec::new();
    let keep_intervals = a.html.is_some();
    let mut print = |functions: &[model::trace::FunctionStats], end: trace::IntervalEnd| {
        // The page plots calls per interval: a partial one would show as a false drop.
        if keep_intervals && !end.partial {
            intervals.push(model::trace::Interval {
                at_s: end.at.as_secs_f64(),
                functions: functions.to_vec(),
            });
        }
        // Stdout holds the data when --json or --html is `-`: the intervals go to stderr then.
        let mut out: Box<dyn Write> = if text_to_stdout {
            Box::new(io::stdout().lock())
        } else {
            Box::new(io::stderr().lock())
        };
        if end.partial {
            writeln!(
                out,
                "--- {:.1} s (partial interval: the last {:.1} s)",
                end.at.as_secs_f64(),
                end.length.as_secs_f64()
            )?;
        } else {
            writeln!(out, "--- {:.1} s", end.at.as_secs_f64())?;
        }
        report::trace::stats_table(&mut out, functions)?;
        out.flush()
    };
    // Children the targets fork from now on (a reloaded server's new workers) are probed too.
    let mut followed_at = Instant::now();
    let end = trace::watch(tracer, &until, a.interval, buckets, &mut print, &mut || {
        if followed_at.elapsed() >= FOLLOW_EVERY {
            followed_at = Instant::now();
            for (parent, child) in tracer.follow_children() {
                eprintln!("tlsscope trace: following pid {child}, forked by {parent} since the start (same library)");
            }
        }
        exporter.tick(&mut render)
    });
    let snapshot = tracer.final_snapshot();
    // The file's last figures: the final ones, before the probes go.
    let written = match &snapshot {
        Ok(last) => exporter.write_file(&mut |format| {
            let m = trace::metrics(last, buckets, tracer, cost, &libraries);
            Ok(report::metrics::exposition(&m, format))
        }),
        Err(_) => Ok(()),
    };
    let elapsed = started.elapsed();
    let environment = experiments::environment::host(std::env::args().collect());
    let mut doc = trace::document(&session.targets, buckets, tracer, elapsed, environment);
    let paths = trace::traced_files(tracer, &watched);
    experiments::environment::note_traced(&mut doc.environment, paths.iter().map(String::as_str));
    // Detach before printing: a slow or closed stdout must not keep the probes in place.
    let child_end = session.end_child(CHILD_GRACE);
    crate::output::detach_noting(session, "trace");
    let ended_by = end?.map(|why| match child_end {
        Some(how) if why != "signal" => how,
        _ => why,
    });
    trace::fill(&mut doc, &snapshot?, buckets);
    written?;

    // The file first: a stdout that fails (full, closed) loses no file.
    if let Some(out) = &a.json {
        out.write_with(|w| Ok(doc.write_json(w)?))?;
    }
    if let Some(out) = &a.html {
        out.write(report::trace_page::page(&doc, &intervals).as_bytes())?;
    }
    if let Some(reason) = &ended_by {
        // With the report on stdout, or said where the report is not.
        if text_to_stdout {
            crate::output::to_stdout(format!("tlsscope trace: stopped: {reason}\n"))?;
        } else {
            eprintln!("tlsscope trace: stopped: {reason}");
        }
    }
    if text_to_stdout {
        let mut out = Vec::new();
        trace_text(&mut out, &doc, !a.no_histograms)?;
        trace_footer(&mut out, &doc)?;
        crate::output::to_stdout(out)?;
    }
    Ok(signals.exit_code(ExitCode::SUCCESS))
}

/// -p/--binary/--lib/--comm (shared by trace and sniff) as targets.
/// The threads `-p` and `--comm` choose.
/// The target options a command (after --) leaves meaningful: -p narrows its processes and
/// --comm its threads; --binary and --lib name what to attach to instead.
pub fn with_command(t: &crate::args::TargetArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        t.binary.is_empty() && t.lib.is_empty(),
        "--binary and --lib name what to attach to: a command (after --) is its own target; leave one out"
    );
    Ok(())
}

pub fn threads_of(t: &crate::args::TargetArgs) -> Threads {
    Threads {
        pids: t.pids.clone(),
        comm: t.comm.clone(),
    }
}

pub fn targets_of(t: &crate::args::TargetArgs, verb: &str) -> anyhow::Result<Vec<Target>> {
    Ok(trace::targets(
        &t.pids,
        &t.binary,
        &t.lib,
        t.comm.as_deref(),
        verb,
    )?)
}
