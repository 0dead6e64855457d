//! `tlsscope serve`: the built-in target. The options become one typed config (`config.rs`),
//! the session sets the server up and serves until stopped (`session.rs`), and the final
//! counters are written as a text summary or JSON (`render.rs`).

pub mod config;
pub mod render;
pub mod session;

use std::io::Write;
use std::process::ExitCode;

use crate::serve::config::ServeArgs;

/// `library`: `--openssl`, resolved.
pub fn run(library: &ossl::LibrarySource, a: &ServeArgs) -> anyhow::Result<ExitCode> {
    let cfg = a.config(library)?;
    for note in &cfg.notes {
        eprintln!("tlsscope serve: {note}");
    }
    // With --stats-json -, stdout is the JSON alone: the lines for people go to stderr.
    let json_on_stdout = cfg.stats_json.as_ref().is_some_and(|o| o.is_stdout());
    let served = session::run(&cfg, |l| {
        if cfg.ready_json {
            let ready = crate::common::servers::Ready {
                listening: l.addr,
                pid: std::process::id(),
                library: l.lib.name().to_string(),
            };
            // A server keeps serving whatever becomes of its stdout.
            if let Ok(line) = serde_json::to_string(&ready) {
                let _ = writeln!(std::io::stdout(), "{line}");
            }
        }
        let mut people: Box<dyn Write> = if json_on_stdout {
            Box::new(std::io::stderr())
        } else {
            Box::new(std::io::stdout())
        };
        let _ = writeln!(people, "{}", render::listening(&cfg, l));
        if let Some(addr) = l.metrics {
            let _ = writeln!(people, "tlsscope serve: metrics at http://{addr}/metrics");
        }
        let _ = people.flush();
    })?;
    if let Some(out) = &cfg.stats_json {
        out.write(&serde_json::to_vec_pretty(&served.snapshot)?)?;
    }
    // A reader that went away (the terminal closed, `| head`) is not the server's failure.
    if !json_on_stdout {
        let _ = render::summary(&mut std::io::stdout().lock(), &served.snapshot);
    }
    Ok(served.signals.exit_code(ExitCode::SUCCESS))
}
