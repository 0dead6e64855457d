//! Writing results to stdout and to the files the options name: every failure (a full disk, a
//! reader that closed the pipe) is an error that says where, never a panic or a silent loss.
//!
//! Every option that names a file or directory to write is an [`OutputFile`] or [`OutputDir`],
//! checked while the command line is parsed: a missing directory, a path that is a directory, or
//! a place tlsscope may not write is a usage error (exit 2) before any work starts, not after a
//! run whose results then have nowhere to go.
//!
//! The check creates nothing: it opens an existing file for writing without truncating it, or
//! makes an unnamed file in the directory a new file would go to and lets it vanish. So a run
//! that fails later in a way that writes nothing leaves no empty file behind, and a file from an
//! earlier run is only replaced when there is a new result to put in it.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// A file an option writes its result to, or stdout (`-`, where the option allows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputFile {
    /// The option, as errors name it (`--json`).
    pub flag: String,
    /// None: stdout.
    pub path: Option<PathBuf>,
}

impl OutputFile {
    /// True when the output is stdout (`-`).
    pub fn is_stdout(&self) -> bool {
        self.path.is_none()
    }

    /// The file's path; `-` for stdout.
    pub fn path_or_dash(&self) -> &Path {
        self.path.as_deref().unwrap_or(Path::new("-"))
    }

    /// Writes the whole result: to stdout, or to the file (created or replaced).
    pub fn write(&self, bytes: impl AsRef<[u8]>) -> anyhow::Result<()> {
        let bytes = bytes.as_ref();
        match &self.path {
            None => to_stdout(bytes),
            Some(path) => std::fs::write(path, bytes)
                .with_context(|| format!("{} {}: cannot write", self.flag, path.display())),
        }
    }

    /// Renders with `render` and writes the result (see [`OutputFile::write`]).
    pub fn write_with(
        &self,
        render: impl FnOnce(&mut Vec<u8>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut bytes = Vec::new();
        render(&mut bytes)
            .with_context(|| format!("{} {}", self.flag, self.path_or_dash().display()))?;
        self.write(&bytes)
    }
}

/// A directory an option writes files into, created at the start of the run if missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputDir {
    /// The option, as errors name it (`--out-dir`).
    pub flag: String,
    pub path: PathBuf,
}

impl OutputDir {
    /// Creates the directory (and missing parents).
    pub fn create(&self) -> anyhow::Result<&Path> {
        std::fs::create_dir_all(&self.path)
            .with_context(|| format!("{} {}: cannot create it", self.flag, self.path.display()))?;
        Ok(&self.path)
    }
}

/// The value parser of file outputs: checks where the output goes (see the module's doc).
#[derive(Clone, Debug)]
pub struct FileParser {
    /// `-` means stdout.
    stdout: bool,
}

/// `--json FILE` and the like: a file, or `-` for stdout.
pub fn file_or_stdout() -> FileParser {
    FileParser { stdout: true }
}

/// A file only (a key log, a metrics file, a certificate, a capture).
pub fn file_only() -> FileParser {
    FileParser { stdout: false }
}

/// The value parser of directory outputs, created by the command if missing.
#[derive(Clone, Debug)]
pub struct DirParser;

/// The option's name as a user types it: `--json`, or `-o` when it has no long name.
fn flag_name(arg: Option<&clap::Arg>) -> String {
    match arg {
        Some(a) => match (a.get_long(), a.get_short()) {
            (Some(long), _) => format!("--{long}"),
            (None, Some(short)) => format!("-{short}"),
            _ => a.get_id().to_string(),
        },
        None => "the output".to_string(),
    }
}

/// A usage error naming the option and the path, saying `why` and what to do.
fn refused(cmd: &clap::Command, flag: &str, value: &OsStr, why: &str) -> clap::Error {
    clap::Error::raw(
        clap::error::ErrorKind::ValueValidation,
        format!("{flag} {}: {why}\n", Path::new(value).display()),
    )
    .with_cmd(cmd)
}

impl clap::builder::TypedValueParser for FileParser {
    type Value = OutputFile;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<OutputFile, clap::Error> {
        let flag = flag_name(arg);
        if value == "-" {
            if self.stdout {
                return Ok(OutputFile { flag, path: None });
            }
            let why = "this option writes a file, not stdout: give a path";
            return Err(refused(cmd, &flag, value, why));
        }
        let path = PathBuf::from(value);
        check_file(&path).map_err(|why| refused(cmd, &flag, value, &why))?;
        Ok(OutputFile {
            flag,
            path: Some(path),
        })
    }
}

impl clap::builder::TypedValueParser for DirParser {
    type Value = OutputDir;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<OutputDir, clap::Error> {
        let flag = flag_name(arg);
        let path = PathBuf::from(value);
        check_dir(&path).map_err(|why| refused(cmd, &flag, value, &why))?;
        Ok(OutputDir { flag, path })
    }
}

/// Whether a file can be written at `path`, creating nothing and changing nothing: why not, as
/// the end of a sentence that starts with the option and the path.
fn check_file(path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err("is a directory: give a file name (e.g. in that directory)".into())
        }
        // An existing file (or a device, a pipe): opened for writing, not truncated, not read.
        Ok(_) => {
            return std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map(drop)
                .map_err(|e| format!("cannot be written ({e}): choose another path"));
        }
        Err(e) if missing(&e) => {}
        Err(e) => return Err(format!("{e}: choose another path")),
    }
    if path.as_os_str().is_empty() {
        return Err("an empty path: give a file name".into());
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    writable_dir(parent)
}

/// A path that is not there: nothing of that name, or a file where a directory should be on the
/// way (then the nearest existing ancestor is found, and named as not a directory).
fn missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// Whether `dir` is a directory a new file can be made in: an unnamed file is made there and
/// vanishes when closed (O_TMPFILE, or made and removed at once where the file system lacks it).
fn writable_dir(dir: &Path) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => tempfile::tempfile_in(dir).map(drop).map_err(|e| {
            format!(
                "cannot make a file in {} ({e}): choose a directory you can write",
                dir.display()
            )
        }),
        Ok(_) => Err(format!(
            "{} is not a directory: choose another path",
            dir.display()
        )),
        Err(e) if missing(&e) => Err(format!(
            "the directory {} does not exist: create it first (mkdir -p), or choose another path",
            dir.display()
        )),
        Err(e) => Err(format!("{}: {e}: choose another path", dir.display())),
    }
}

/// Whether `path` is, or can be created as, a directory to write files in: an existing one must
/// be writable; a missing one is created by the command, under its nearest existing ancestor,
/// which must be writable (the check creates nothing).
fn check_dir(path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => writable_dir(path),
        Ok(_) => Err("is a file, not a directory: give a directory".into()),
        Err(e) if missing(&e) => {
            let ancestor = path
                .ancestors()
                .skip(1)
                .map(|a| {
                    if a.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        a
                    }
                })
                .find(|a| a.exists())
                .unwrap_or(Path::new("."));
            writable_dir(ancestor)
        }
        Err(e) => Err(format!("{e}: choose another path")),
    }
}

/// Refuses two options that both write to stdout (`--json - --csv -`): the outputs would mix.
/// Returns whether one does (the command then keeps its text report off stdout).
pub fn one_on_stdout<'a>(
    outputs: impl IntoIterator<Item = &'a Option<OutputFile>>,
) -> Result<bool, crate::common::usage::UsageError> {
    let on_stdout: Vec<&str> = outputs
        .into_iter()
        .flatten()
        .filter(|o| o.is_stdout())
        .map(|o| o.flag.as_str())
        .collect();
    match on_stdout[..] {
        [] => Ok(false),
        [_] => Ok(true),
        _ => Err(crate::common::usage::UsageError(format!(
            "{} would all write to stdout (-): give all but one of them a file",
            on_stdout.join(" and ")
        ))),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_is_an_error_naming_it() {
        let out = OutputFile {
            flag: "--csv".into(),
            path: Some("/dev/full".into()),
        };
        let e = out.write(b"a row\n").unwrap_err();
        let text = crate::common::usage::one_line(&e);
        assert!(text.contains("--csv /dev/full"), "{text}");
        assert!(text.contains("No space left"), "{text}");
    }

    #[test]
    fn checking_a_path_creates_nothing_and_empties_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("new.json");
        assert_eq!(check_file(&new), Ok(()));
        let earlier = dir.path().join("earlier.json");
        std::fs::write(&earlier, "kept").unwrap();
        assert_eq!(check_file(&earlier), Ok(()));
        assert_eq!(check_dir(&dir.path().join("a/b")), Ok(()));
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(std::fs::read_to_string(&earlier).unwrap(), "kept");
    }

    #[test]
    fn a_path_that_cannot_be_written_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let missing = check_file(&dir.path().join("no/x.json")).unwrap_err();
        assert!(missing.contains("does not exist: create it"), "{missing}");
        let is_dir = check_file(dir.path()).unwrap_err();
        assert!(is_dir.contains("is a directory"), "{is_dir}");
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        let under_file = check_file(&file.join("x.json")).unwrap_err();
        assert!(under_file.contains("is not a directory"), "{under_file}");
        let dir_on_file = check_dir(&file.join("d")).unwrap_err();
        assert!(dir_on_file.contains("is not a directory"), "{dir_on_file}");
        assert!(check_file(Path::new("")).is_err());
    }

    #[test]
    fn a_closed_pipe_is_named() {
        let e = stdout_error(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(e.to_string().contains("stdout was closed"), "{e}");
    }
}
