//! The kernel's syscall tracepoints of the read/write family (`syscalls:sys_enter_*` and
//! `syscalls:sys_exit_*`), attached whether or not tracefs is mounted.
//!
//! libbpf looks a tracepoint's id up in tracefs (`/sys/kernel/tracing/events/...`), which a
//! fresh machine does not mount; without it, `attach_tracepoint` fails with ENOENT. The kernel
//! itself only needs the id (`perf_event_open` with `PERF_TYPE_TRACEPOINT`). So tlsscope reads
//! the ids from a tracefs that is mounted, or, where none is, from one it mounts in a mount
//! namespace of its own, held by a short-lived thread: the system's mounts never change, and
//! nothing is left mounted when the thread ends. Where even that is impossible (no
//! CAP_SYS_ADMIN, no tracefs in the kernel), the hooks are reported missing with the reason and
//! what the user loses, and the probes work without them.

use std::collections::HashMap;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libbpf_rs::{Link, ProgramMut};

/// The syscalls OpenSSL's socket BIO (and kTLS) read and write with.
pub const SYSCALLS: [&str; 8] = [
    "read", "write", "readv", "writev", "recvfrom", "sendto", "recvmsg", "sendmsg",
];

/// Where tracefs is usually mounted: its own mount point, then inside debugfs.
const TRACEFS_PATHS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Which side of the syscalls a program hooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    /// `syscalls:sys_enter_*`: the arguments (sniff's socket fd).
    Enter,
    /// `syscalls:sys_exit_*`: the return value (trace's outcome of a <= 0 OpenSSL return).
    Exit,
}

impl Edge {
    fn prefix(self) -> &'static str {
        match self {
            Edge::Enter => "sys_enter_",
            Edge::Exit => "sys_exit_",
        }
    }

    /// The tracepoints' names for the user, e.g. `syscalls:sys_exit_{read,write,...}`.
    pub fn hooks_name(self) -> String {
        format!("syscalls:{}{{{}}}", self.prefix(), SYSCALLS.join(","))
    }
}

/// How the tracepoints' ids were found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdSource {
    /// A tracefs mounted at this path.
    Mounted(PathBuf),
    /// No tracefs was mounted: tlsscope mounted one in a mount namespace of its own.
    PrivateMount,
}

/// The state of one program's syscall hooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyscallHooks {
    Attached(IdSource),
    /// Not attached; the reason says why and what would bring them back.
    Missing(String),
}

impl SyscallHooks {
    pub fn attached(&self) -> bool {
        matches!(self, SyscallHooks::Attached(_))
    }

    /// How the hooks were reached, or why they are missing.
    pub fn detail(&self) -> String {
        match self {
            SyscallHooks::Attached(IdSource::Mounted(root)) => {
                format!("tracefs at {}", root.display())
            }
            SyscallHooks::Attached(IdSource::PrivateMount) => {
                "tracefs mounted in tlsscope's own mount namespace".into()
            }
            SyscallHooks::Missing(reason) => reason.clone(),
        }
    }

    /// The one line to show the user, if anything is worth saying: a private mount, or hooks
    /// missing. `effect` says what is lost without the hooks.
    pub fn note(&self, edge: Edge, effect: &str) -> Option<String> {
        match self {
            SyscallHooks::Attached(IdSource::Mounted(_)) => None,
            SyscallHooks::Attached(IdSource::PrivateMount) => Some(format!(
                "tracefs is not mounted: tlsscope mounted it in a mount namespace of its own to find {} (the system's mounts are unchanged)",
                edge.hooks_name()
            )),
            SyscallHooks::Missing(reason) => Some(format!(
                "kernel hooks missing: {} ({reason}): {effect}",
                edge.hooks_name()
            )),
        }
    }
}

/// The tracepoints' ids by name (`sys_exit_read`, ...), and where they came from.
#[derive(Clone, Debug)]
struct Ids {
    by_name: HashMap<String, u64>,
    source: IdSource,
}

/// Looked up once per process: the ids do not change while the kernel runs.
static IDS: OnceLock<Result<Ids, String>> = OnceLock::new();

fn ids() -> &'static Result<Ids, String> {
    IDS.get_or_init(find_ids)
}

fn find_ids() -> Result<Ids, String> {
    for root in mounted_tracefs() {
        if let Ok(by_name) = read_ids(&root) {
            return Ok(Ids {
                by_name,
                source: IdSource::Mounted(root),
            });
        }
    }
    let by_name = ids_from_private_mount()?;
    Ok(Ids {
        by_name,
        source: IdSource::PrivateMount,
    })
}

/// Every place a tracefs is visible now: the usual paths, then any other tracefs mount.
fn mounted_tracefs() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = TRACEFS_PATHS.iter().map(PathBuf::from).collect();
    if let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") {
        for line in mounts.lines() {
            let mut fields = line.split_whitespace();
            let (Some(_), Some(dir), Some(kind)) = (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let dir = PathBuf::from(dir);
            if kind == "tracefs" && !roots.contains(&dir) {
                roots.push(dir);
            }
        }
    }
    roots
}

/// Reads the ids of both edges of every syscall in [`SYSCALLS`] under a tracefs root.
fn read_ids(root: &Path) -> Result<HashMap<String, u64>, String> {
    let mut by_name = HashMap::new();
    for edge in [Edge::Enter, Edge::Exit] {
        for syscall in SYSCALLS {
            let name = format!("{}{syscall}", edge.prefix());
            let path = root.join("events/syscalls").join(&name).join("id");
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let id = text
                .trim()
                .parse()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            by_name.insert(name, id);
        }
    }
    Ok(by_name)
}

/// Mounts tracefs in a new mount namespace that only a scratch thread is in, reads the ids,
/// and lets the thread end, which drops the namespace and its mount.
fn ids_from_private_mount() -> Result<HashMap<String, u64>, String> {
    let thread = std::thread::Builder::new()
        .name("tlsscope-tracefs".into())
        .spawn(|| {
            unshare_mounts()?;
            let root = Path::new(TRACEFS_PATHS[0]);
            mount_tracefs(root)?;
            read_ids(root)
        })
        .map_err(|e| format!("cannot start a thread to mount tracefs: {e}"))?;
    thread
        .join()
        .unwrap_or_else(|_| Err("the thread mounting tracefs panicked".into()))
        .map_err(|e| {
            format!("tracefs is not mounted and tlsscope could not mount it privately: {e}; mount it (mount -t tracefs nodev /sys/kernel/tracing) or run with CAP_SYS_ADMIN")
        })
}

/// Moves the calling thread alone into a new mount namespace whose mounts do not propagate
/// back to the system's.
fn unshare_mounts() -> Result<(), String> {
    // SAFETY: unshare takes flags only. CLONE_NEWNS implies CLONE_FS, so the calling thread gets
    // its own copy of the filesystem context and namespace; the process's other threads keep
    // theirs.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(format!(
            "making a mount namespace: {}",
            io::Error::last_os_error()
        ));
    }
    mount(c"none", c"/", None, libc::MS_REC | libc::MS_PRIVATE)
        .map_err(|e| format!("making the new mount namespace private: {e}"))
}

fn mount_tracefs(root: &Path) -> Result<(), String> {
    let target =
        std::ffi::CString::new(root.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    mount(
        c"tracefs",
        &target,
        Some(c"tracefs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
    )
    .map_err(|e| format!("mounting tracefs at {}: {e}", root.display()))
}

fn mount(
    source: &CStr,
    target: &CStr,
    kind: Option<&CStr>,
    flags: libc::c_ulong,
) -> io::Result<()> {
    let kind = kind.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is a NUL-terminated string that outlives the call, or null for the
    // file system type of a propagation change, which the kernel ignores; no data argument.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            kind,
            flags,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `struct perf_event_attr` up to its first published size (PERF_ATTR_SIZE_VER0, 64 bytes),
/// which is all a tracepoint event needs.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// Opens the perf event of tracepoint `id`, for all processes. A BPF program attached to it runs
/// on every CPU (tracepoint programs hang on the event, not on the CPU it was opened for).
fn open_tracepoint(id: u64) -> io::Result<OwnedFd> {
    let attr = PerfEventAttr {
        kind: PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: id,
        ..PerfEventAttr::default()
    };
    // SAFETY: `attr` is a valid perf_event_attr of the size it declares and outlives the call;
    // pid -1 with cpu 0 and no group is what the kernel asks of tracepoint events.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            -1 as libc::pid_t,
            0 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: perf_event_open returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attaches `prog` to one edge of every syscall in [`SYSCALLS`], all or none: a partial set
/// would settle some calls and not others. Returns the links and how it went.
pub fn attach(prog: &ProgramMut<'_>, edge: Edge) -> (Vec<Link>, SyscallHooks) {
    let ids = match ids() {
        Ok(ids) => ids,
        Err(reason) => return (Vec::new(), SyscallHooks::Missing(reason.clone())),
    };
    let mut links = Vec::new();
    for syscall in SYSCALLS {
        let name = format!("{}{syscall}", edge.prefix());
        match attach_one(prog, ids, &name) {
            Ok(link) => links.push(link),
            Err(reason) => {
                // Dropping the links attached so far detaches them.
                return (Vec::new(), SyscallHooks::Missing(reason));
            }
        }
    }
    (links, SyscallHooks::Attached(ids.source.clone()))
}

fn attach_one(prog: &ProgramMut<'_>, ids: &Ids, name: &str) -> Result<Link, String> {
    let id = *ids
        .by_name
        .get(name)
        .ok_or_else(|| format!("no id for syscalls:{name}"))?;
    let event = open_tracepoint(id)
        .map_err(|e| format!("the kernel refused a perf event for syscalls:{name}: {e}"))?;
    match prog.attach_perf_event(event.as_raw_fd()) {
        Ok(link) => {
            // The link owns the event now: libbpf closes it on detach.
            let _ = event.into_raw_fd();
            Ok(link)
        }
        Err(e) => Err(format!(
            "attaching to syscalls:{name}: {}",
            super::log::with_reason(&e.to_string())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_name_lists_every_syscall_of_the_edge() {
        let name = Edge::Exit.hooks_name();
        assert!(name.starts_with("syscalls:sys_exit_{read,write,"), "{name}");
        assert!(name.ends_with("sendmsg}"), "{name}");
    }

    #[test]
    fn only_a_private_mount_or_a_missing_hook_is_worth_a_note() {
        let mounted = SyscallHooks::Attached(IdSource::Mounted("/sys/kernel/tracing".into()));
        assert_eq!(mounted.note(Edge::Exit, "x"), None);
        let private = SyscallHooks::Attached(IdSource::PrivateMount);
        let note = private.note(Edge::Enter, "x").unwrap();
        assert!(note.contains("mount namespace of its own"), "{note}");
        let missing = SyscallHooks::Missing("no tracefs".into());
        let note = missing.note(Edge::Exit, "outcomes unknown").unwrap();
        assert!(note.contains("(no tracefs): outcomes unknown"), "{note}");
    }
}
