//! Showing builds in progress on a stream the caller gives (tlsscope's stderr).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{BuildError, Progress};

/// How often the terminal status line is redrawn while nothing else happens.
const REDRAW_INTERVAL: Duration = Duration::from_millis(500);

/// The progress of builds on `out`: on a terminal one status line, redrawn as the build moves
/// on and every half second; otherwise one plain line per stage.
pub struct StatusDisplay<W> {
    out: Mutex<W>,
    terminal: bool,
    /// How a failed build of a batch is said (the error's own words when None).
    words: Option<fn(&BuildError) -> String>,
}

impl<W: Write + Send> StatusDisplay<W> {
    /// A display on `out`; `terminal` says whether `out` is a terminal that can redraw a line.
    pub fn new(out: W, terminal: bool) -> Self {
        StatusDisplay {
            out: Mutex::new(out),
            terminal,
            words: None,
        }
    }

    /// The display with failed builds said in `words` (the caller's, e.g. naming its flags).
    pub fn with_words(self, words: fn(&BuildError) -> String) -> Self {
        StatusDisplay {
            words: Some(words),
            ..self
        }
    }

    /// The stream, back from the display.
    pub fn into_inner(self) -> W {
        self.out
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `work` (one build, named `label`, e.g. "OpenSSL 3.0.2") with its progress shown.
    pub fn run<T>(&self, label: &str, work: impl FnOnce(&mut dyn FnMut(Progress)) -> T) -> T {
        let status = Mutex::new(Status {
            label: label.to_owned(),
            stage: "starting".to_owned(),
            objects: 0,
            started: Instant::now(),
        });
        let finished = AtomicBool::new(false);
        let result = std::thread::scope(|scope| {
            if self.terminal {
                scope.spawn(|| self.tick(&status, &finished));
            }
            let mut on_progress = |progress: Progress| self.update(&status, &progress);
            let result = work(&mut on_progress);
            finished.store(true, Ordering::Relaxed);
            result
        });
        // After the ticker has stopped, so that it cannot draw the line again.
        if self.terminal {
            self.write("\r\x1b[2K");
        }
        result
    }

    /// Shows a build that failed without stopping the others: "error: ...".
    pub fn error(&self, error: &BuildError) {
        let text = match self.words {
            Some(words) => words(error),
            None => error.to_string(),
        };
        self.write(&format!("error: {text}\n"));
    }

    /// Applies `progress` to `status` and shows it.
    fn update(&self, status: &Mutex<Status>, progress: &Progress) {
        let mut status = status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let stage = progress.describe();
        let stage_changed = stage != status.stage;
        if let Progress::Compiling { objects } = progress {
            status.objects = *objects;
        }
        status.stage = stage;
        if self.terminal {
            self.redraw(&status.line());
        } else if stage_changed && *progress != Progress::Done {
            self.write(&format!("{}: {}\n", status.label, status.stage));
        }
    }

    /// Redraws the status line every [`REDRAW_INTERVAL`] until `finished`.
    fn tick(&self, status: &Mutex<Status>, finished: &AtomicBool) {
        while !finished.load(Ordering::Relaxed) {
            let line = status.lock().map(|s| s.line()).unwrap_or_default();
            self.redraw(&line);
            std::thread::sleep(REDRAW_INTERVAL);
        }
    }

    /// Replaces the current terminal line with `line`.
    fn redraw(&self, line: &str) {
        self.write(&format!("\r\x1b[2K{line}"));
    }

    /// Writes `text` and flushes; a display that cannot be written is not worth failing for.
    fn write(&self, text: &str) {
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
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

/// Formats a duration as "58s" or "3m12s".
pub(crate) fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds < 60 {
        format!("{seconds}s")
    } else {
        format!("{}m{:02}s", seconds / 60, seconds % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_short() {
        assert_eq!(format_duration(Duration::from_secs(58)), "58s");
        assert_eq!(format_duration(Duration::from_secs(192)), "3m12s");
    }

    #[test]
    fn off_a_terminal_each_stage_is_one_line() {
        let display = StatusDisplay::new(Vec::new(), false);
        let answer = display.run("OpenSSL 3.0.2", |progress| {
            progress(Progress::Configuring);
            progress(Progress::Compiling { objects: 0 });
            progress(Progress::Compiling { objects: 1 });
            progress(Progress::Done);
            42
        });
        let broke = BuildError::NotBuilt { name: "x".into() };
        display.error(&broke);
        let display = display.with_words(|e| format!("in other words: {e}"));
        display.error(&broke);
        let shown = String::from_utf8(display.into_inner()).unwrap();
        assert_eq!(answer, 42);
        assert_eq!(
            shown,
            format!(
                "OpenSSL 3.0.2: configuring\nOpenSSL 3.0.2: compiling\nerror: {broke}\n\
                 error: in other words: {broke}\n"
            )
        );
    }

    #[test]
    fn on_a_terminal_the_line_is_redrawn_and_cleared() {
        let display = StatusDisplay::new(Vec::new(), true);
        display.run("OpenSSL 3.0.2", |progress| {
            progress(Progress::Compiling { objects: 7 })
        });
        let shown = String::from_utf8(display.into_inner()).unwrap();
        assert!(
            shown.contains("\r\x1b[2KOpenSSL 3.0.2: compiling, 7 objects, 0s"),
            "{shown:?}"
        );
        assert!(shown.ends_with("\r\x1b[2K"), "{shown:?}");
    }
}
