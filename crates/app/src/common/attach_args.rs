//! The options trace and sniff share for what to attach to (-p, --binary, --lib, --comm),
//! checked once for their configs: the targets, the threads, and whether --backend fits them.

use std::ffi::OsString;
use std::path::Path;

use probes::{Target, Threads};

use crate::common::args::TargetArgs;
use crate::common::probing::{processes_only, BackendChoice};

/// What trace or sniff attaches to, checked: the targets (empty with a command), the PIDs -p
/// gave, the command to start (after --) and the backend that fits them.
pub struct AttachTo {
    /// What to attach to (-p, --binary, --lib); empty with a command.
    pub targets: Vec<Target>,
    /// -p: with a command, the processes it narrows the run to; without, the processes whose
    /// end ends the run.
    pub pids: Vec<u32>,
    /// A program to start (after --), with its arguments; empty for none.
    pub command: Vec<OsString>,
    pub backend: BackendChoice,
}

impl TargetArgs {
    /// What to attach to, checked once (`verb`, "trace" or "sniff", names the command in the
    /// errors): the targets when there is no command (the machine must be able to trace
    /// them), else that no option names a target beside the command; then the backend.
    pub fn attach_to(
        &self,
        command: &[OsString],
        backend: BackendChoice,
        verb: &str,
    ) -> anyhow::Result<AttachTo> {
        let targets = if command.is_empty() {
            probes::latency::check_can_trace()?;
            self.targets(verb)?
        } else {
            self.check_with_command()?;
            Vec::new()
        };
        check_backend(backend, !command.is_empty(), &targets, verb)?;
        Ok(AttachTo {
            targets,
            pids: self.pids.clone(),
            command: command.to_vec(),
            backend,
        })
    }

    /// Checks what to attach to (`verb`, "trace" or "sniff", names the command in the error) and
    /// turns it into targets: processes, programs with TLS linked in, libraries; --comm is
    /// checked here too.
    pub fn targets(&self, verb: &str) -> anyhow::Result<Vec<Target>> {
        let (pids, binary, lib) = (&self.pids, &self.binary, &self.lib);
        if pids.is_empty() && binary.is_empty() && lib.is_empty() {
            anyhow::bail!("nothing to {verb}: give -p PID, --binary PATH or --lib PATH");
        }
        if let Some(comm) = &self.comm {
            if comm.is_empty() || comm.len() > 15 {
                anyhow::bail!(
                    "--comm {comm:?}: a thread name is 1 to 15 bytes (as in /proc/PID/comm)"
                );
            }
        }
        for pid in pids {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                anyhow::bail!("no process with PID {pid}");
            }
        }
        let mut targets = Vec::new();
        // With --binary or --lib, the PIDs filter; alone, they also say which libraries to use.
        if binary.is_empty() && lib.is_empty() {
            targets.extend(pids.iter().map(|&p| Target::Pid(p)));
        }
        for path in binary {
            if !path.is_file() {
                anyhow::bail!("--binary {}: no such file", path.display());
            }
            targets.push(Target::Binary(path.clone()));
        }
        for path in lib {
            if !path.is_file() {
                anyhow::bail!("--lib {}: no such file", path.display());
            }
            targets.push(Target::Library(path.clone()));
        }
        Ok(targets)
    }

    /// The target options a command (after --) leaves meaningful: -p narrows its processes and
    /// --comm its threads; --binary and --lib name what to attach to instead.
    pub fn check_with_command(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.binary.is_empty() && self.lib.is_empty(),
            "--binary and --lib name what to attach to: a command (after --) is its own target; leave one out"
        );
        Ok(())
    }

    /// The threads -p and --comm choose.
    pub fn threads(&self) -> Threads {
        Threads {
            pids: self.pids.clone(),
            comm: self.comm.clone(),
        }
    }
}

/// Checks that --backend fits what is traced (`verb`: "trace" or "sniff"): the kernel's probes
/// go into running processes, not a command tlsscope starts; tlsscope's library goes into
/// processes (a command, or -p), not files.
pub fn check_backend(
    backend: BackendChoice,
    command: bool,
    targets: &[Target],
    verb: &str,
) -> anyhow::Result<()> {
    if command && backend == BackendChoice::Kernel {
        let what = if verb == "trace" { "traces" } else { "sniffs" };
        anyhow::bail!("--backend kernel {what} running processes: start the program, then tlsscope {verb} -p PID (or leave --backend out to {verb} the command in process)");
    }
    if !command && backend == BackendChoice::User && processes_only(targets).is_empty() {
        anyhow::bail!("--backend user {verb}s processes: give -p PID (--binary and --lib need --backend kernel), or start the program: tlsscope {verb} -- COMMAND");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pids: &[u32], lib: &[&str], comm: Option<&str>) -> TargetArgs {
        TargetArgs {
            pids: pids.to_vec(),
            binary: Vec::new(),
            lib: lib.iter().map(std::path::PathBuf::from).collect(),
            comm: comm.map(str::to_string),
        }
    }

    fn refused(t: &TargetArgs, verb: &str) -> String {
        t.targets(verb).expect_err("refused").to_string()
    }

    #[test]
    fn what_to_attach_to_is_checked_naming_the_option() {
        assert_eq!(
            refused(&args(&[], &[], None), "sniff"),
            "nothing to sniff: give -p PID, --binary PATH or --lib PATH"
        );
        let me = std::process::id();
        assert_eq!(
            refused(&args(&[me], &[], Some("a-name-longer-than-15")), "trace"),
            "--comm \"a-name-longer-than-15\": a thread name is 1 to 15 bytes (as in /proc/PID/comm)"
        );
        assert_eq!(
            refused(&args(&[me], &["/nonexistent/libssl.so"], None), "trace"),
            "--lib /nonexistent/libssl.so: no such file"
        );
        // -p alone: the processes; with a file, the PIDs only filter.
        assert_eq!(
            args(&[me], &[], None).targets("trace").unwrap(),
            [Target::Pid(me)]
        );
        let exe = std::env::current_exe().unwrap();
        let with_lib = args(&[me], &[exe.to_str().unwrap()], None);
        assert_eq!(with_lib.targets("trace").unwrap(), [Target::Library(exe)]);
    }

    #[test]
    fn a_backend_that_cannot_reach_the_targets_is_refused() {
        assert_eq!(
            check_backend(BackendChoice::Kernel, true, &[], "sniff").unwrap_err().to_string(),
            "--backend kernel sniffs running processes: start the program, then tlsscope sniff -p PID (or leave --backend out to sniff the command in process)"
        );
        let lib = [Target::Library("/x.so".into())];
        assert_eq!(
            check_backend(BackendChoice::User, false, &lib, "trace").unwrap_err().to_string(),
            "--backend user traces processes: give -p PID (--binary and --lib need --backend kernel), or start the program: tlsscope trace -- COMMAND"
        );
        assert!(check_backend(BackendChoice::User, false, &[Target::Pid(1)], "trace").is_ok());
        assert!(check_backend(BackendChoice::User, true, &[], "trace").is_ok());
        assert!(check_backend(BackendChoice::Kernel, false, &lib, "trace").is_ok());
    }
}
