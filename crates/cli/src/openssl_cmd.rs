//! `tlsscope openssl build|list`: building OpenSSL versions into the cache and listing them.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::bail;
use ossl_build::{BuildCache, BuildOptions, BuildOutcome, Progress};

/// How often the terminal status line is redrawn while nothing else happens.
const REDRAW_INTERVAL: Duration = Duration::from_millis(500);

/// The build cache: `$XDG_CACHE_HOME/tlsscope/openssl`, else `$HOME/.cache/tlsscope/openssl`.
pub fn cache_root() -> PathBuf {
    let base = non_empty_env("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home_dir().join(".cache"));
    base.join("tlsscope").join("openssl")
}

/// Cargo's home: `$CARGO_HOME`, else `$HOME/.cargo`.
pub fn cargo_home() -> PathBuf {
    non_empty_env("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home_dir().join(".cargo"))
}

/// `$HOME`, or `/` when it is unset.
fn home_dir() -> PathBuf {
    non_empty_env("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// The value of environment variable `name` if it is set and not empty.
fn non_empty_env(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|value| !value.is_empty())
}

/// Builds each of `versions` from the openssl-src crate, or the one tree or tarball at `source`,
/// with `make -j<jobs>`; `force` rebuilds installed versions. Progress goes to stderr and one
/// final line per version to stdout.
pub fn build(
    versions: &[String],
    source: Option<&Path>,
    jobs: usize,
    force: bool,
) -> anyhow::Result<()> {
    if source.is_some() && !versions.is_empty() {
        bail!("--source builds the one tree it points at: drop the VERSION arguments or --source");
    }
    if source.is_none() && versions.is_empty() {
        bail!("name an OpenSSL version to build (e.g. tlsscope openssl build 3.0.2) or pass --source PATH");
    }
    let cache = BuildCache::new(cache_root());
    let options = BuildOptions {
        jobs: effective_jobs(jobs),
        force,
        cargo_home: cargo_home(),
    };
    if let Some(path) = source {
        let label = path.display().to_string();
        let outcome = with_status(&label, |progress| {
            cache.build_source(path, &options, progress)
        })?;
        report(&outcome);
        return Ok(());
    }
    build_versions(&cache, &ossl_build::unique(versions), &options)
}

/// Builds `versions` one after another; a failure does not stop the others.
fn build_versions(
    cache: &BuildCache,
    versions: &[String],
    options: &BuildOptions,
) -> anyhow::Result<()> {
    let mut failed = Vec::new();
    for version in versions {
        let label = format!("OpenSSL {version}");
        match with_status(&label, |progress| {
            cache.build_version(version, options, progress)
        }) {
            Ok(outcome) => report(&outcome),
            Err(error) if versions.len() == 1 => return Err(error.into()),
            Err(error) => {
                eprintln!("error: {error}");
                failed.push(version.as_str());
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!(
            "{} of {} builds failed: {}",
            failed.len(),
            versions.len(),
            failed.join(", ")
        )
    }
}

/// `jobs`, or the number of CPUs when it is 0.
fn effective_jobs(jobs: usize) -> usize {
    if jobs > 0 {
        return jobs;
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Prints the final line of one build to stdout.
fn report(outcome: &BuildOutcome) {
    let build = outcome.installed();
    match outcome {
        BuildOutcome::Built(_) => println!(
            "OpenSSL {} ready at {} (built in {})",
            build.version,
            build.prefix.display(),
            format_duration(Duration::from_secs_f64(build.build_seconds))
        ),
        BuildOutcome::AlreadyInstalled(_) => println!(
            "OpenSSL {} already built at {}",
            build.version,
            build.prefix.display()
        ),
    }
}

/// Formats a duration as "58s" or "3m12s".
fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds < 60 {
        format!("{seconds}s")
    } else {
        format!("{}m{:02}s", seconds / 60, seconds % 60)
    }
}

/// What the status display knows about the build in progress.
struct Status {
    label: String,
    stage: String,
    objects: usize,
    started: Instant,
}

impl Status {
    /// The status line: "OpenSSL 3.0.2: compiling, 412 objects, 1m05s".
    fn line(&self) -> String {
        let elapsed = format_duration(self.started.elapsed());
        if self.objects > 0 {
            format!(
                "{}: {}, {} objects, {elapsed}",
                self.label, self.stage, self.objects
            )
        } else {
            format!("{}: {}, {elapsed}", self.label, self.stage)
        }
    }
}

/// Runs `work` with a progress display on stderr: one redrawn line on a terminal (ticking
/// every half second), otherwise one plain line per stage.
fn with_status<T>(label: &str, work: impl FnOnce(&mut dyn FnMut(Progress)) -> T) -> T {
    let terminal = std::io::stderr().is_terminal();
    let status = Mutex::new(Status {
        label: label.to_owned(),
        stage: "starting".to_owned(),
        objects: 0,
        started: Instant::now(),
    });
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        if terminal {
            scope.spawn(|| tick(&status, &finished));
        }
        let mut on_progress = |progress: Progress| update(&status, &progress, terminal);
        let result = work(&mut on_progress);
        finished.store(true, Ordering::Relaxed);
        if terminal {
            clear_line();
        }
        result
    })
}

/// Applies `progress` to `status` and shows it.
fn update(status: &Mutex<Status>, progress: &Progress, terminal: bool) {
    let mut status = status
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let stage = progress.describe();
    let stage_changed = stage != status.stage;
    if let Progress::Compiling { objects } = progress {
        status.objects = *objects;
    }
    status.stage = stage;
    if terminal {
        redraw(&status.line());
    } else if stage_changed && *progress != Progress::Done {
        eprintln!("{}: {}", status.label, status.stage);
    }
}

/// Redraws the status line every [`REDRAW_INTERVAL`] until `finished`.
fn tick(status: &Mutex<Status>, finished: &AtomicBool) {
    while !finished.load(Ordering::Relaxed) {
        let line = status.lock().map(|s| s.line()).unwrap_or_default();
        redraw(&line);
        std::thread::sleep(REDRAW_INTERVAL);
    }
}

/// Replaces the current terminal line of stderr with `line`.
fn redraw(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = write!(stderr, "\r\x1b[2K{line}");
    let _ = stderr.flush();
}

/// Erases the status line.
fn clear_line() {
    let mut stderr = std::io::stderr().lock();
    let _ = write!(stderr, "\r\x1b[2K");
    let _ = stderr.flush();
}

/// Prints the installed builds as a table, or how to make one if there are none.
pub fn list() -> anyhow::Result<()> {
    let cache = BuildCache::new(cache_root());
    let builds = cache.installed()?;
    if builds.is_empty() {
        println!(
            "No OpenSSL builds in {} yet: build one with `tlsscope openssl build 3.0.2` \
             (or --source PATH for a local tree or tarball).",
            cache.root().display()
        );
        return Ok(());
    }
    let table = report::compare::Table {
        header: ["VERSION", "SOURCE", "PREFIX"].map(String::from).to_vec(),
        rows: builds
            .iter()
            .map(|b| {
                vec![
                    b.version.clone(),
                    b.source.clone(),
                    b.prefix.display().to_string(),
                ]
            })
            .collect(),
    };
    print!("{}", table.aligned());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_short() {
        assert_eq!(format_duration(Duration::from_secs(58)), "58s");
        assert_eq!(format_duration(Duration::from_secs(192)), "3m12s");
    }
}
