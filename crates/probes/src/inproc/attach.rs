//! Putting the probe library into running processes and taking it out: checks that refuse
//! what cannot work, the library loaded with the process's own loader (called on one of its
//! threads), the region mapped, the real functions handed to the wrappers, and the GOT entries
//! of the wrapped functions swapped for the wrappers while every thread is stopped. Detaching
//! swaps them back; the library stays loaded, inert.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol};

use super::got::{self, Loaded};
use super::inject::{Failure, Stopped, DATA};
use crate::maps::{maps_file, with_descendants};

/// One GOT entry tlsscope swapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swapped {
    pub address: u64,
    pub original: u64,
    pub wrapper: u64,
}

/// A process the library was put into, and what was swapped in it.
#[derive(Clone, Debug)]
pub struct Attachment {
    pub pid: u32,
    pub swapped: Vec<Swapped>,
    /// Whether tlsscope loaded the library now (else an earlier run had).
    pub loaded_now: bool,
    /// The functions (`inproc_abi::FUNCTIONS` indexes) the program calls through a GOT entry
    /// of its own: the only ones whose calls the wrappers see.
    pub called: Vec<usize>,
}

/// A refusal or failure, for the process it concerns.
#[derive(Debug)]
pub struct Refused {
    pub pid: u32,
    pub reason: Refusal,
}

/// Why the in-process backend cannot attach to a process. Most of these the kernel backend
/// does not mind ([`Refusal::kernel_backend_can`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another tracer (by its PID, as /proc gives it) holds the process.
    TracedAlready { tracer: String },
    /// The process sees other files than tlsscope does.
    OtherMountNamespace,
    /// Not an x86-64 program.
    Architecture { machine: String },
    /// Yama forbids ptrace until reboot.
    YamaForbids,
    /// Yama allows ptrace of a running process only to root.
    YamaRootOnly { scope: u32 },
    /// The executable defines the TLS functions itself: no GOT entry to redirect.
    StaticallyLinked { executable: PathBuf, symbol: String },
    /// It calls the wanted functions through no GOT entry.
    NoGotCalls,
    /// It has no dynamic loader to load the probe library with.
    NoLoader,
    /// Anything else: a failure to read, stop or call into the process.
    Failed(String),
}

impl Refusal {
    /// What is in the way, without the remedy.
    pub fn what(&self) -> String {
        match self {
            Refusal::TracedAlready { tracer } => {
                format!("it is being traced already (by PID {tracer}, a debugger or strace?)")
            }
            Refusal::OtherMountNamespace => "it is in another mount namespace (a container?), \
                where tlsscope's library file is not"
                .into(),
            Refusal::Architecture { machine } => {
                format!("it is a {machine} program; attaching in process is built for x86-64 only")
            }
            Refusal::YamaForbids => "Yama forbids ptrace on this machine \
                (kernel.yama.ptrace_scope = 3, until reboot)"
                .into(),
            Refusal::YamaRootOnly { scope } => format!(
                "Yama allows ptrace of a running process only to root here \
                 (kernel.yama.ptrace_scope = {scope})"
            ),
            Refusal::StaticallyLinked { executable, symbol } => format!(
                "its executable {} has the TLS library linked in statically (it defines \
                 {symbol}): there is no GOT entry to redirect",
                executable.display()
            ),
            Refusal::NoGotCalls => "it calls none of the wanted functions through a GOT (it \
                links them statically or looks them up with dlsym)"
                .into(),
            Refusal::NoLoader => "it has no dynamic loader to call (a static program?)".into(),
            Refusal::Failed(why) => why.clone(),
        }
    }

    /// A remedy other than the kernel backend, when there is one.
    pub fn other_remedy(&self) -> Option<&'static str> {
        match self {
            Refusal::TracedAlready { .. } => Some("detach that first"),
            Refusal::YamaRootOnly { .. } => Some("run tlsscope as root"),
            _ => None,
        }
    }

    /// Whether the kernel backend traces such a process.
    pub fn kernel_backend_can(&self) -> bool {
        !matches!(self, Refusal::Failed(_))
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what())?;
        match (self.other_remedy(), self.kernel_backend_can()) {
            (Some(other), true) => write!(f, ": {other}, or use the kernel backend"),
            (None, true) => f.write_str(": use the kernel backend"),
            _ => Ok(()),
        }
    }
}

impl From<String> for Refusal {
    fn from(why: String) -> Refusal {
        Refusal::Failed(why)
    }
}

impl From<&str> for Refusal {
    fn from(why: &str) -> Refusal {
        Refusal::Failed(why.to_string())
    }
}

fn refuse(pid: u32, reason: impl Into<Refusal>) -> Refused {
    Refused {
        pid,
        reason: reason.into(),
    }
}

/// Checks what would make attaching fail or misbehave, before touching the process.
pub fn check(pid: u32) -> Result<(), Refused> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| refuse(pid, "no such process"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
            .to_string()
    };
    let tracer = field("TracerPid:");
    if !tracer.is_empty() && tracer != "0" {
        return Err(refuse(pid, Refusal::TracedAlready { tracer }));
    }
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).ok();
    if ns("self") != ns(&pid.to_string()) {
        return Err(refuse(pid, Refusal::OtherMountNamespace));
    }
    if let Some(reason) = yama_refusal(
        std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() } == 0,
    ) {
        return Err(refuse(pid, reason));
    }
    let exe = std::fs::read(format!("/proc/{pid}/exe"))
        .map_err(|e| refuse(pid, format!("cannot read its executable: {e}")))?;
    match object::File::parse(&*exe).map(|f| f.architecture()) {
        Ok(object::Architecture::X86_64) => Ok(()),
        Ok(other) => Err(refuse(
            pid,
            Refusal::Architecture {
                machine: format!("{other:?}"),
            },
        )),
        Err(e) => Err(refuse(pid, format!("its executable is not ELF: {e}"))),
    }
}

/// Why Yama's `ptrace_scope` forbids attaching, if it does (None: no Yama, or allowed).
fn yama_refusal(scope: Option<u32>, root: bool) -> Option<Refusal> {
    match scope {
        Some(3) => Some(Refusal::YamaForbids),
        Some(scope @ (1 | 2)) if !root => Some(Refusal::YamaRootOnly { scope }),
        _ => None,
    }
}

/// The probe library's exported symbols, from its bytes.
pub struct LibrarySymbols {
    pub map: u64,
    pub real_table: u64,
    /// Per `inproc_abi::FUNCTIONS` index, its wrapper.
    pub wrappers: Vec<u64>,
}

impl LibrarySymbols {
    pub fn read(bytes: &[u8]) -> Result<LibrarySymbols, Failure> {
        let file = object::File::parse(bytes).map_err(|e| format!("probe library: {e}"))?;
        let find = |name: &str| {
            file.dynamic_symbols()
                .find(|s| s.name() == Ok(name) && s.is_definition())
                .map(|s| s.address())
                .ok_or_else(|| format!("the probe library lacks {name}"))
        };
        Ok(LibrarySymbols {
            map: find(inproc_abi::MAP_FUNCTION)?,
            real_table: find(inproc_abi::REAL_TABLE)?,
            wrappers: inproc_abi::FUNCTIONS
                .iter()
                .map(|f| find(f.name))
                .collect::<Result<_, _>>()?,
        })
    }
}

/// The loader function to call in a process: glibc's `dlopen` (in libc since 2.34, in libdl
/// before), else glibc's internal `__libc_dlopen_mode`.
fn loader_function(objects: &[Loaded]) -> Option<u64> {
    let named = |prefix: &str, symbol: &str| {
        objects.iter().find_map(|o| {
            let name = o.path.file_name()?.to_str()?;
            if !name.starts_with(prefix) {
                return None;
            }
            let data = std::fs::read(&o.path).ok()?;
            let file = object::File::parse(&*data).ok()?;
            let address = file
                .dynamic_symbols()
                .find(|s| s.name() == Ok(symbol) && s.is_definition())?
                .address();
            Some(o.bias + address)
        })
    };
    named("libc.so", "dlopen")
        .or_else(|| named("libdl.so", "dlopen"))
        .or_else(|| named("libc.so", "__libc_dlopen_mode"))
}

/// What to put where in one process.
pub struct Request<'a> {
    pub library: &'a Path,
    pub symbols: &'a LibrarySymbols,
    /// The region file, opened by the process itself.
    pub region: &'a Path,
    /// Function indexes to redirect.
    pub wanted: &'a [usize],
}

/// Puts the library into process `pid` and redirects its calls of the wanted functions.
pub fn attach(pid: u32, request: &Request<'_>) -> Result<Attachment, Refused> {
    let fail = |reason: String| refuse(pid, reason);
    let mem = std::fs::File::open(format!("/proc/{pid}/mem"))
        .map_err(|e| fail(format!("cannot read its memory: {e}")))?;
    let read_u64 = |addr: u64| {
        let mut b = [0; 8];
        std::os::unix::fs::FileExt::read_exact_at(&mem, &mut b, addr)
            .map_err(|e| format!("cannot read its memory at {addr:#x}: {e}"))?;
        Ok(u64::from_ne_bytes(b))
    };
    let objects = got::loaded(pid).map_err(fail)?;
    let redirect =
        got::find(pid, &objects, request.wanted, request.library, &read_u64).map_err(fail)?;
    if redirect.from_callers == 0 {
        return Err(refuse(
            pid,
            match &redirect.defining_executable {
                Some((exe, name)) => Refusal::StaticallyLinked {
                    executable: exe.clone(),
                    symbol: name.to_string(),
                },
                None => Refusal::NoGotCalls,
            },
        ));
    }
    let mut stopped = Stopped::seize(pid).map_err(|e| fail(ptrace_words(e)))?;
    let (base, loaded_now) = match base_of(&objects, request.library) {
        Some(base) => (base, false),
        None => {
            let dlopen = loader_function(&objects).ok_or_else(|| refuse(pid, Refusal::NoLoader))?;
            let tid = stopped.quiet_thread().map_err(fail)?;
            let path = c_path(request.library);
            let handle = stopped
                .call(
                    tid,
                    dlopen,
                    &[DATA, (libc::RTLD_NOW | libc::RTLD_LOCAL) as u64],
                    &path,
                )
                .map_err(|e| fail(format!("loading the probe library: {e}")))?;
            if handle == 0 {
                return Err(fail(format!(
                    "its loader could not load {} (dlopen returned NULL)",
                    request.library.display()
                )));
            }
            let now = got::loaded(pid).map_err(fail)?;
            let base = base_of(&now, request.library).ok_or_else(|| {
                fail("the probe library was loaded but is not in its memory map".into())
            })?;
            (base, true)
        }
    };
    let tid = stopped.quiet_thread().map_err(fail)?;
    let rc = stopped
        .call(
            tid,
            base + request.symbols.map,
            &[DATA],
            &c_path(request.region),
        )
        .map_err(|e| fail(format!("mapping the shared region: {e}")))?;
    if rc as i32 != 0 {
        return Err(fail(format!(
            "it could not map the shared region {}",
            request.region.display()
        )));
    }
    stopped.stop_all().map_err(fail)?;
    for &(slot, real) in &redirect.reals {
        let at = base + request.symbols.real_table + 8 * slot as u64;
        stopped.write_u64(at, real).map_err(fail)?;
    }
    let mut swapped = Vec::new();
    for e in &redirect.entries {
        let wrapper = base + request.symbols.wrappers[e.index];
        // Read again with every thread stopped: lazy binding may have filled it since.
        let now = stopped.read_u64(e.address).map_err(fail)?;
        let real = redirect.reals.iter().find(|r| r.0 == e.index).map(|r| r.1);
        let original = if now == e.seen {
            e.original
        } else if Some(now) == real {
            now
        } else {
            continue;
        };
        stopped.write_u64(e.address, wrapper).map_err(fail)?;
        swapped.push(Swapped {
            address: e.address,
            original,
            wrapper,
        });
    }
    Ok(Attachment {
        pid,
        swapped,
        loaded_now,
        called: redirect.called,
    })
}

/// Puts back every entry that still holds tlsscope's wrapper, in process `pid` (an attached
/// process or a child it forked since, which shares its layout). Returns how many.
pub fn restore(pid: u32, swapped: &[Swapped]) -> Result<usize, Failure> {
    let mut stopped = Stopped::seize(pid)?;
    stopped.stop_all()?;
    let mut restored = 0;
    for s in swapped {
        if stopped.read_u64(s.address)? == s.wrapper {
            stopped.write_u64(s.address, s.original)?;
            restored += 1;
        }
    }
    Ok(restored)
}

/// Where `library` is loaded in a process, if it is.
fn base_of(objects: &[Loaded], library: &Path) -> Option<u64> {
    objects.iter().find(|o| o.path == library).map(|o| o.bias)
}

fn c_path(path: &Path) -> Vec<u8> {
    let mut bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    bytes.push(0);
    bytes
}

/// A ptrace refusal, with what usually causes it.
fn ptrace_words(e: Failure) -> String {
    if e.contains("Operation not permitted") {
        format!("{e} (tlsscope needs root or CAP_SYS_PTRACE, and a process not traced by another)")
    } else {
        e
    }
}

/// Process `root`'s descendants that have `library` loaded and are not in `known`: forked
/// since the attach, they share its swapped entries.
pub fn forked_since(root: u32, known: &[u32], library: &Path) -> Vec<u32> {
    with_descendants(&[root])
        .into_iter()
        .filter(|p| !known.contains(p))
        .filter(|&p| maps_file(p, library))
        .collect()
}

/// The library file as a process names it in its memory map.
pub fn library_path(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yama_refuses_only_where_it_forbids() {
        assert_eq!(yama_refusal(None, false), None);
        assert_eq!(yama_refusal(Some(0), false), None);
        assert_eq!(yama_refusal(Some(1), true), None);
        assert_eq!(
            yama_refusal(Some(1), false),
            Some(Refusal::YamaRootOnly { scope: 1 })
        );
        assert_eq!(yama_refusal(Some(3), true), Some(Refusal::YamaForbids));
        let words = Refusal::YamaRootOnly { scope: 1 }.to_string();
        assert!(words.contains("ptrace_scope = 1"), "{words}");
        assert!(
            words.ends_with("run tlsscope as root, or use the kernel backend"),
            "{words}"
        );
        assert!(!Refusal::Failed("x".into()).kernel_backend_can());
    }
}
