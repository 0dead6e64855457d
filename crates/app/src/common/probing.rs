//! What trace and sniff (and the lab) share on the session side: the backend choice, whether
//! to try the in-process one first, the targets in words, starting and ending a program
//! tlsscope runs under its library, and when a trace or capture ends. (The options that say
//! what to attach to are checked in `attach_args`.)

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use probes::Target;

use crate::common::error::Result;

/// The backend asked for with `--backend`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// eBPF uprobes.
    Kernel,
    /// tlsscope's library inside the traced program.
    User,
    /// The in-process backend where it can go (a program tlsscope starts), else the kernel's.
    #[default]
    Auto,
}

impl std::str::FromStr for BackendChoice {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "kernel" => Ok(BackendChoice::Kernel),
            "user" => Ok(BackendChoice::User),
            "auto" => Ok(BackendChoice::Auto),
            other => Err(format!(
                "unknown backend '{other}' (choose from kernel, user, auto)"
            )),
        }
    }
}

/// "pid 1, library /x.so".
pub fn target_words(targets: &[Target]) -> String {
    targets
        .iter()
        .map(|t| match t {
            Target::Pid(p) => format!("pid {p}"),
            Target::Binary(p) => format!("binary {}", p.display()),
            Target::Library(p) => format!("library {}", p.display()),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The targets in words, each process with the children the plan follows: "pid 10 and its
/// children 11, 12 (same library)".
pub fn planned_words(targets: &[Target], plan: &probes::Plan) -> Vec<String> {
    targets
        .iter()
        .map(|t| {
            let words = target_words(std::slice::from_ref(t));
            let Target::Pid(pid) = t else {
                return words;
            };
            let children: Vec<String> = plan
                .children
                .iter()
                .filter(|(parent, _)| parent == pid)
                .map(|(_, child)| child.to_string())
                .collect();
            if children.is_empty() {
                words
            } else {
                format!(
                    "{words} and its children {} (same library)",
                    children.join(", ")
                )
            }
        })
        .collect()
}

/// A process with a crypto engine loaded may run its crypto inside async jobs, on stacks of
/// their own: a kernel return probe on a function a job pauses in loses its place, and the
/// process crashes when the function returns. Such processes keep their TLS-call probes and
/// lose the crypto ones (said in a note); naming crypto functions for them is an error.
pub fn without_crypto_in_async_jobs(
    selection: &probes::Selection,
    pids: &[u32],
    notes: &mut Vec<String>,
) -> Result<probes::Selection> {
    let Some((pid, engine)) = pids.iter().find_map(|&p| engine_of(p).map(|e| (p, e))) else {
        return Ok(selection.clone());
    };
    if !selection.takes(probes::Group::Crypto) {
        return Ok(selection.clone());
    }
    let named = selection.named_in(probes::Group::Crypto);
    if !named.is_empty() {
        crate::fail!(
            "process {pid} has a crypto engine loaded ({engine}): kernel return probes on {} \
             could crash it (its crypto may run in async jobs, on stacks of their own); trace \
             the SSL calls, or use --backend user",
            named.join(", ")
        );
    }
    notes.push(format!(
        "process {pid} has a crypto engine loaded ({engine}): its crypto functions are not \
         traced by kernel probes, which could crash it inside async jobs; --backend user traces them"
    ));
    Ok(selection.clone().without(probes::Group::Crypto))
}

/// The crypto engine a process has loaded (a file in an OpenSSL `engines-*` directory), if any.
fn engine_of(pid: u32) -> Option<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|path| path.contains("/engines-") && path.ends_with(".so"))
        .map(str::to_string)
}

/// The PIDs of `targets` when they are all processes (the in-process backend attaches to
/// processes, not files), else none.
pub fn processes_only(targets: &[Target]) -> Vec<u32> {
    let pids: Vec<u32> = targets
        .iter()
        .filter_map(|t| match t {
            Target::Pid(p) => Some(*p),
            _ => None,
        })
        .collect();
    if pids.len() == targets.len() {
        pids
    } else {
        Vec::new()
    }
}

/// Whether the in-process backend wraps every function of `selection`.
pub fn covers_all(selection: &probes::Selection) -> bool {
    probes::user::plan(selection, std::path::Path::new("")).is_ok_and(|p| p.missing.is_empty())
}

/// "pid 12 (+ 2 children): 9 GOT entries redirected".
pub fn attached_words(tracer: &probes::user::UserTracer) -> Vec<String> {
    tracer
        .attachments()
        .iter()
        .map(|a| {
            format!(
                "pid {} ({} GOT entries redirected{})",
                a.pid,
                a.swapped.len(),
                if a.loaded_now {
                    ""
                } else {
                    ", library already loaded"
                }
            )
        })
        .collect()
}

/// Whether to attach the in-process backend to running processes `pids` first: asked for
/// (the configuration checked that -p was given), or with auto where it covers every function
/// asked for.
/// With auto, not for Go programs: their crypto/tls is compiled in, with no library call for
/// the in-process library to wrap.
pub fn user_first(backend: BackendChoice, pids: &[u32], selection: &probes::Selection) -> bool {
    match backend {
        BackendChoice::Kernel => false,
        BackendChoice::User => !pids.is_empty(),
        BackendChoice::Auto => {
            !pids.is_empty() && covers_all(selection) && !pids.iter().any(|&p| go_process(p))
        }
    }
}

/// Whether process `pid` runs a Go program.
fn go_process(pid: u32) -> bool {
    let exe = std::path::PathBuf::from(format!("/proc/{pid}/exe"));
    probes::GoBinary::read(&exe).is_ok()
}

/// The program `command` runs (found on PATH as the shell would), when it is a Go program.
pub fn go_program(command: &[std::ffi::OsString]) -> Option<std::path::PathBuf> {
    let program = std::path::Path::new(command.first()?);
    let path = if program.components().count() > 1 {
        program.to_path_buf()
    } else {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join(program))
            .find(|p| p.is_file())?
    };
    probes::GoBinary::read(&path).ok().map(|_| path)
}

/// Starts `command` as it is (a Go program, probed by the kernel).
pub fn spawn_plain(command: &[std::ffi::OsString]) -> Result<std::process::Child> {
    let (program, args) = command.split_first().expect("a command is not empty");
    std::process::Command::new(program)
        .args(args)
        .spawn()
        .map_err(|e| {
            crate::common::error::Error::msg(format!(
                "cannot start {}: {e}",
                program.to_string_lossy()
            ))
        })
}

/// Starts `command` under the in-process library of `tracer`.
pub fn spawn(
    command: &[std::ffi::OsString],
    tracer: &probes::user::UserTracer,
) -> Result<std::process::Child> {
    let (program, args) = command.split_first().expect("a command is not empty");
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    tracer.prepare(&mut cmd);
    cmd.spawn().map_err(|e| {
        crate::common::error::Error::msg(format!("cannot start {}: {e}", program.to_string_lossy()))
    })
}

/// Ends a program tlsscope started, if it still runs: SIGTERM, then SIGKILL after `grace`.
/// Returns how it ended, in words.
pub fn end_program(child: &mut std::process::Child, grace: Duration) -> Option<String> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(format!("the command exited ({status})"));
    }
    let pid = i32::try_from(child.id()).ok()?;
    // SAFETY: kill signals the child we started and have not reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(format!(
                "tlsscope ended the command with SIGTERM ({status})"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let status = child.wait().ok()?;
    Some(format!(
        "the command outlived SIGTERM by {} s and was killed ({status})",
        grace.as_secs()
    ))
}

/// The processes whose end ends a trace or capture: the program tlsscope started, if it did,
/// else the -p targets.
pub fn watched_pids(child: Option<&std::process::Child>, targets: &[u32]) -> Vec<u32> {
    match child {
        Some(c) => vec![c.id()],
        None => targets.to_vec(),
    }
}

/// When a trace ends: after `duration`, when `stop` is set, or when every process of `pids`
/// (if any) has exited.
pub struct Until<'a> {
    pub duration: Option<Duration>,
    pub pids: &'a [u32],
    pub stop: &'a AtomicBool,
}

/// A process that exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}
