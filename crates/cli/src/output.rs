//! Writing results to stdout and to the files the options name: every failure (a full disk, a
//! reader that closed the pipe) is an error that says where, never a panic or a silent loss.

use std::io::{self, Write};
use std::path::Path;

use anyhow::Context;

/// Writes `text` to stdout and flushes it.
pub fn to_stdout(text: impl AsRef<[u8]>) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_ref())
        .and_then(|()| out.flush())
        .map_err(stdout_error)
}

/// An error of writing to stdout, saying so (the OS error alone names no file).
pub fn stdout_error(e: io::Error) -> anyhow::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        anyhow::anyhow!("stdout was closed before the results were written to it (broken pipe)")
    } else {
        anyhow::anyhow!("writing the results to stdout: {e}")
    }
}

/// Stdout for commands that print as they go: its errors name it (see [`stdout_error`]).
pub struct Stdout(io::StdoutLock<'static>);

impl Stdout {
    pub fn lock() -> Stdout {
        Stdout(io::stdout().lock())
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(named)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(named)
    }
}

/// The same error, its text saying it was stdout's.
fn named(e: io::Error) -> io::Error {
    io::Error::new(e.kind(), stdout_error(e).to_string())
}

/// Drops `probes` (detaching them), saying so on stderr when that takes over a second, so a
/// command that seems to hang after Ctrl-C says what it is doing.
pub fn detach_noting<T>(probes: T, command: &str) {
    let (done, waiting) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                waiting.recv_timeout(std::time::Duration::from_secs(1))
            {
                eprintln!("tlsscope {command}: detaching the probes...");
            }
        });
        drop(probes);
        drop(done);
    });
}

/// Flushes a buffered output file, naming it by its option on failure: a `BufWriter` dropped
/// unflushed would lose the error, and the end of the file with it.
pub fn finish<W: Write>(mut w: io::BufWriter<W>, flag: &str, path: &Path) -> anyhow::Result<()> {
    w.flush()
        .with_context(|| format!("{flag} {}: cannot write", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_is_an_error_naming_it() {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut w = io::BufWriter::new(f);
        w.write_all(b"a row\n").unwrap();
        let e = finish(w, "--csv", Path::new("/dev/full")).unwrap_err();
        let text = crate::one_line(&e);
        assert!(text.contains("--csv /dev/full"), "{text}");
        assert!(text.contains("No space left"), "{text}");
    }

    #[test]
    fn a_closed_pipe_is_named() {
        let e = stdout_error(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(e.to_string().contains("stdout was closed"), "{e}");
    }
}
