//! Running the external programs of a build: checking they exist, and running them with their
//! output captured into the build log.

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;

use super::BuildError;

/// A program the build needs, with how to install it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tool {
    /// The program name looked up on PATH.
    pub program: &'static str,
    /// The installation hint shown when it is missing.
    pub hint: &'static str,
}

/// Perl runs OpenSSL's Configure.
pub(crate) const PERL: Tool = Tool {
    program: "perl",
    hint: "apt-get install perl",
};
/// Make drives the compilation.
pub(crate) const MAKE: Tool = Tool {
    program: "make",
    hint: "apt-get install make",
};
/// Cargo fetches the openssl-src crate.
pub(crate) const CARGO: Tool = Tool {
    program: "cargo",
    hint: "install Rust with rustup",
};
/// CMake configures AWS-LC and BoringSSL.
pub(crate) const CMAKE: Tool = Tool {
    program: "cmake",
    hint: "apt-get install cmake",
};
/// Ninja compiles what CMake configured.
pub(crate) const NINJA: Tool = Tool {
    program: "ninja",
    hint: "apt-get install ninja-build",
};
/// Tar unpacks source tarballs.
pub(crate) const TAR: Tool = Tool {
    program: "tar",
    hint: "apt-get install tar",
};

/// Returns whether `program` can be started (it answers `--version`).
pub(crate) fn is_installed(program: &str) -> bool {
    let started = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    !matches!(started, Err(error) if error.kind() == ErrorKind::NotFound)
}

/// Fails with a clear message naming the first of `tools` that is not installed.
pub(crate) fn require_tools(target: &str, tools: &[Tool]) -> Result<(), BuildError> {
    match tools.iter().find(|tool| !is_installed(tool.program)) {
        Some(tool) => Err(BuildError::MissingTool {
            target: target.to_owned(),
            tool: tool.program,
            hint: tool.hint,
        }),
        None => Ok(()),
    }
}

/// Picks the C compiler: OpenSSL's Linux targets default to `gcc`; fall back to `cc`.
pub(crate) fn find_c_compiler(target: &str) -> Result<&'static str, BuildError> {
    ["gcc", "cc"]
        .into_iter()
        .find(|compiler| is_installed(compiler))
        .ok_or_else(|| BuildError::MissingTool {
            target: target.to_owned(),
            tool: "cc",
            hint: "apt-get install gcc",
        })
}

/// Picks the C++ compiler (BoringSSL's libssl, parts of AWS-LC): `g++`, else `c++`.
pub(crate) fn find_cxx_compiler(target: &str) -> Result<&'static str, BuildError> {
    ["g++", "c++"]
        .into_iter()
        .find(|compiler| is_installed(compiler))
        .ok_or_else(|| BuildError::MissingTool {
            target: target.to_owned(),
            tool: "g++",
            hint: "apt-get install g++",
        })
}

/// Starts `command`, mapping a missing program to [`BuildError::Spawn`].
fn spawn(command: &mut Command) -> Result<std::process::Child, BuildError> {
    command.spawn().map_err(|source| BuildError::Spawn {
        program: command.get_program().to_string_lossy().into_owned(),
        source,
    })
}

/// Runs `command` to completion and returns its exit status and combined output.
pub(crate) fn run_captured(command: &mut Command) -> Result<(ExitStatus, String), BuildError> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|source| BuildError::Spawn {
            program: command.get_program().to_string_lossy().into_owned(),
            source,
        })?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Ok((output.status, text))
}

/// The last non-empty line of `text`, or a placeholder.
pub(crate) fn last_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .unwrap_or("no output")
        .to_owned()
}

/// Sends every line read from `stream` to `lines` (lossily decoded) until end of file.
fn forward_lines(stream: impl Read, lines: mpsc::Sender<String>) {
    let mut reader = BufReader::new(stream);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match reader.read_until(b'\n', &mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buffer).trim_end().to_owned();
                if lines.send(line).is_err() {
                    return;
                }
            }
        }
    }
}

/// The build log of one version, written while the build runs.
pub(crate) struct BuildLog {
    /// Where the log is being written.
    pub path: PathBuf,
    file: File,
}

impl BuildLog {
    /// Creates (truncates) the log at `path`.
    pub fn create(path: PathBuf) -> Result<Self, BuildError> {
        let file = File::create(&path).map_err(|e| BuildError::io("create build log", &path, e))?;
        Ok(BuildLog { path, file })
    }

    /// Appends one line.
    pub fn line(&mut self, text: &str) -> Result<(), BuildError> {
        writeln!(self.file, "{text}").map_err(|e| BuildError::io("write build log", &self.path, e))
    }

    /// Flushes and closes the log, returning its path.
    pub fn finish(mut self) -> Result<PathBuf, BuildError> {
        self.file
            .flush()
            .map_err(|e| BuildError::io("write build log", &self.path, e))?;
        Ok(self.path)
    }

    /// Runs `command` with stdout and stderr appended to the log line by line; `on_line` sees
    /// each line too. Returns the exit status.
    pub fn run(
        &mut self,
        command: &mut Command,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<ExitStatus, BuildError> {
        self.line(&format!("$ {}", describe(command)))?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = spawn(command)?;
        let (sender, receiver) = mpsc::channel();
        let readers = [
            child
                .stdout
                .take()
                .map(|out| spawn_forwarder(out, sender.clone())),
            child.stderr.take().map(|err| spawn_forwarder(err, sender)),
        ];
        let mut logged = Ok(());
        for line in receiver {
            on_line(&line);
            if logged.is_ok() {
                logged = self.line(&line);
            }
        }
        readers.into_iter().flatten().for_each(|reader| {
            let _ = reader.join();
        });
        let status = child.wait().map_err(|e| BuildError::Spawn {
            program: command.get_program().to_string_lossy().into_owned(),
            source: e,
        })?;
        logged?;
        self.line(&format!("# {status}"))?;
        Ok(status)
    }
}

/// Starts a thread forwarding the lines of `stream` to `sender`.
fn spawn_forwarder(
    stream: impl Read + Send + 'static,
    sender: mpsc::Sender<String>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || forward_lines(stream, sender))
}

/// Renders `command` as a shell-like line for the log.
pub(crate) fn describe(command: &Command) -> String {
    let mut words = vec![command.get_program().to_string_lossy().into_owned()];
    words.extend(
        command
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned()),
    );
    words.join(" ")
}

/// The last `count` non-empty lines of the file at `path` (not counting our exit status
/// markers), joined with " | ".
pub(crate) fn tail_of(path: &Path, count: usize) -> String {
    let text = std::fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned());
    let text = text.unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("# exit status"))
        .collect();
    let start = lines.len().saturating_sub(count);
    let tail: Vec<String> = lines[start..]
        .iter()
        .map(|line| truncate(line, 200))
        .collect();
    if tail.is_empty() {
        "(empty log)".to_owned()
    } else {
        tail.join(" | ")
    }
}

/// Shortens `line` to at most `max_chars` characters.
fn truncate(line: &str, max_chars: usize) -> String {
    match line.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line.to_owned(),
    }
}

/// Returns whether a make output line compiled one object file (`cc ... -c -o x.o x.c`).
pub(crate) fn is_compile_line(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let compiles = words.contains(&"-c");
    let object_output = words
        .windows(2)
        .any(|pair| pair[0] == "-o" && pair[1].ends_with(".o"));
    compiles && object_output
}

/// Finds "Can't locate IPC/Cmd.pm in @INC" in Configure output and returns "IPC::Cmd".
pub(crate) fn missing_perl_module(line: &str) -> Option<String> {
    let rest = line.split("Can't locate ").nth(1)?;
    let file = rest.split_whitespace().next()?;
    let module = file.strip_suffix(".pm")?;
    Some(module.replace('/', "::"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_compile_lines_are_counted() {
        let v1 = "gcc  -I. -Iinclude -fPIC -pthread -m64 -Wa,--noexecstack -Wall -O3 \
                  -DOPENSSL_USE_NODELETE -MMD -MF crypto/aes/aes_cbc.d.tmp \
                  -MT crypto/aes/aes_cbc.o -c -o crypto/aes/aes_cbc.o crypto/aes/aes_cbc.c";
        let v3 = "gcc  -I. -Iinclude -fPIC -pthread -m64 -c -o \
                  crypto/aes/libcrypto-lib-aesni-x86_64.o crypto/aes/aesni-x86_64.s";
        assert!(is_compile_line(v1));
        assert!(is_compile_line(v3));
        assert!(!is_compile_line(
            "gcc -fPIC -shared -o libssl.so.1.1 ssl/s3_lib.o"
        ));
        assert!(!is_compile_line(
            "CC=\"gcc\" /usr/bin/perl crypto/aes/asm/aesni-x86_64.pl elf x.s"
        ));
    }

    #[test]
    fn build_missing_perl_module_is_recognised() {
        let line = "Can't locate IPC/Cmd.pm in @INC (you may need to install the IPC::Cmd module)";
        assert_eq!(missing_perl_module(line).as_deref(), Some("IPC::Cmd"));
        assert_eq!(
            missing_perl_module("Configuring OpenSSL version 3.0.2"),
            None
        );
    }

    #[test]
    fn build_log_tail_is_one_line() {
        let path = std::env::temp_dir().join(format!("ossl-tail-test-{}", std::process::id()));
        std::fs::write(&path, "a\n\nb\nc\nd\n# exit status: 2\n").unwrap();
        let tail = tail_of(&path, 3);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(tail, "b | c | d");
    }

    #[test]
    fn build_log_captures_both_streams() {
        let path = std::env::temp_dir().join(format!("ossl-log-test-{}", std::process::id()));
        let mut log = BuildLog::create(path.clone()).unwrap();
        let mut seen = Vec::new();
        let status = log
            .run(
                Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
                &mut |line| seen.push(line.to_owned()),
            )
            .unwrap();
        log.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(status.code(), Some(3));
        seen.sort();
        assert_eq!(seen, ["err", "out"]);
        assert!(text.starts_with("$ sh -c"), "{text}");
        assert!(text.contains("out\n") && text.contains("err\n"), "{text}");
    }
}
