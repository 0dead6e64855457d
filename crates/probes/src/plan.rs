//! Where to attach: from the user's targets (a process, a binary, a library) to a list of
//! (file, offset, function) attach points, and the functions that could not be found, each with
//! its reason. Plain file reading: no root, no BPF.

use std::path::{Path, PathBuf};

use crate::catalog::{functions_for, Function, Groups, CATALOG};
use crate::maps::{tls_libraries, LibraryKind};
use crate::symbols::SymbolTable;
use crate::Error;

/// What to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The TLS libraries this process maps (or, when it maps none, its own executable).
    Pid(u32),
    /// A program with the TLS library linked in statically: its own symbol tables.
    Binary(PathBuf),
    /// A shared library, in every process that uses it.
    Library(PathBuf),
}

/// One uprobe + uretprobe pair to attach. `F` is what the probe's catalog says of the function:
/// trace's [`Function`], or sniff's function name (see `sniff::SniffPoint`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachPoint<F = &'static Function> {
    /// The function's id: its index in its catalog.
    pub id: u16,
    pub function: F,
    /// The symbol found (one of the function's spellings).
    pub symbol: &'static str,
    pub path: PathBuf,
    pub offset: u64,
    /// The process to attach in (the kernel installs the breakpoint only there), or -1: all.
    pub pid: i32,
}

/// The name of an attach point's function, whatever its catalog says of it.
pub(crate) trait FunctionName {
    fn function_name(&self) -> &'static str;
}

impl FunctionName for &'static Function {
    fn function_name(&self) -> &'static str {
        self.name
    }
}

impl FunctionName for &'static str {
    fn function_name(&self) -> &'static str {
        self
    }
}

/// A function that was looked for and is not traced, with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    pub function: &'static str,
    pub path: PathBuf,
    pub reason: String,
}

/// The attach points for a set of targets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub points: Vec<AttachPoint>,
    pub missing: Vec<Missing>,
    /// `SSL_get_error` is probed to settle OpenSSL calls returning <= 0.
    pub exact: bool,
    /// When not empty, only these catalog functions.
    pub only: Vec<String>,
}

impl Plan {
    /// Plans `targets` with the probe `groups`; `exact` adds `SSL_get_error` to settle
    /// OpenSSL calls returning <= 0. Fails when a target cannot be read, or when nothing at
    /// all can be attached.
    pub fn new(targets: &[Target], groups: Groups, exact: bool) -> Result<Plan, Error> {
        Plan::with_functions(targets, groups, &[], exact)
    }

    /// Like [`Plan::new`], narrowed to the catalog functions named in `only` (when not
    /// empty), whatever their group.
    pub fn with_functions(
        targets: &[Target],
        groups: Groups,
        only: &[String],
        exact: bool,
    ) -> Result<Plan, Error> {
        if let Some(unknown) = only.iter().find(|n| crate::catalog::id_of(n).is_none()) {
            return Err(Error::UnknownFunction {
                name: unknown.clone(),
                known: CATALOG
                    .iter()
                    .filter(|f| f.semantics != crate::catalog::Semantics::OpensslGetError)
                    .map(|f| f.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let groups = if only.is_empty() {
            groups
        } else {
            Groups::all()
        };
        let mut plan = Plan {
            exact,
            only: only.to_vec(),
            ..Plan::default()
        };
        for target in targets {
            match target {
                Target::Pid(pid) => plan.add_process(*pid, groups)?,
                Target::Binary(path) => {
                    let table = SymbolTable::read(path)?;
                    plan.add_static(&table, groups, -1);
                }
                Target::Library(path) => {
                    let table = SymbolTable::read(path)?;
                    match LibraryKind::of(path) {
                        Some(kind) => plan.add_library(&table, kind, groups, -1),
                        None => plan.add_static(&table, groups, -1),
                    }
                }
            }
        }
        if plan.points.is_empty() {
            return Err(Error::NothingToAttach {
                reasons: plan
                    .missing
                    .iter()
                    .map(|m| format!("{}: {}", m.function, m.reason))
                    .take(4)
                    .collect::<Vec<_>>()
                    .join("; "),
            });
        }
        Ok(plan)
    }

    fn add_process(&mut self, pid: u32, groups: Groups) -> Result<(), Error> {
        let libraries = tls_libraries(pid)?;
        let pid_arg = i32::try_from(pid).unwrap_or(-1);
        if libraries.is_empty() {
            // No TLS library mapped: the TLS code may be linked into the executable itself.
            let exe = PathBuf::from(format!("/proc/{pid}/exe"));
            let exe = std::fs::read_link(&exe).unwrap_or(exe);
            let table = SymbolTable::read(&exe)?;
            let before = self.points.len();
            self.add_static(&table, groups, pid_arg);
            if self.points.len() == before {
                return Err(Error::NoTlsLibrary { pid });
            }
            return Ok(());
        }
        for library in libraries {
            let table = SymbolTable::read(&library.path)?;
            self.add_library(&table, library.kind, groups, pid_arg);
        }
        Ok(())
    }

    /// Every catalog function of `kind` in `groups`: attach where found, else say why not.
    fn add_library(&mut self, table: &SymbolTable, kind: LibraryKind, groups: Groups, pid: i32) {
        for (id, function) in self.selected(kind, groups) {
            match find(table, function) {
                Ok(found) => self.push(point(table, id, function, found, pid)),
                Err(reason) => self.missing.push(Missing {
                    function: function.name,
                    path: table.path().to_path_buf(),
                    reason,
                }),
            }
        }
    }

    /// A binary with the library compiled in: whichever catalog functions it defines. Those
    /// it lacks are not reported one by one (a static OpenSSL program has no GnuTLS functions);
    /// the caller reports "nothing to attach" when it defines none.
    fn add_static(&mut self, table: &SymbolTable, groups: Groups, pid: i32) {
        let kinds = [
            LibraryKind::OpensslSsl,
            LibraryKind::OpensslCrypto,
            LibraryKind::GnuTls,
            LibraryKind::Nss,
            LibraryKind::Nspr,
        ];
        let before = self.points.len();
        for kind in kinds {
            for (id, function) in self.selected(kind, groups) {
                if let Ok(found) = find(table, function) {
                    self.push(point(table, id, function, found, pid));
                }
            }
        }
        if self.points.len() == before {
            self.missing.push(Missing {
                function: "(any TLS function)",
                path: table.path().to_path_buf(),
                reason: format!(
                    "{} defines none of tlsscope's {} functions (OpenSSL, GnuTLS, NSS) in the chosen groups",
                    table.path().display(),
                    CATALOG.len()
                ),
            });
        }
    }

    /// The catalog functions of `kind` this plan wants: the groups' (or the named ones),
    /// plus `SSL_get_error` when exact.
    fn selected(&self, kind: LibraryKind, groups: Groups) -> Vec<(u16, &'static Function)> {
        functions_for(kind, groups, self.exact)
            .into_iter()
            .filter(|(_, f)| {
                self.only.is_empty()
                    || self.only.iter().any(|n| n == f.name)
                    || f.semantics == crate::catalog::Semantics::OpensslGetError
            })
            .collect()
    }

    fn push(&mut self, point: AttachPoint) {
        let same = |p: &AttachPoint| {
            p.path == point.path && p.offset == point.offset && p.pid == point.pid
        };
        if !self.points.iter().any(same) {
            self.points.push(point);
        }
    }

    /// The distinct files the plan attaches to.
    pub fn files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = Vec::new();
        for p in &self.points {
            if !files.contains(&p.path.as_path()) {
                files.push(&p.path);
            }
        }
        files
    }
}

fn point(
    table: &SymbolTable,
    id: u16,
    function: &'static Function,
    (symbol, offset): (&'static str, u64),
    pid: i32,
) -> AttachPoint {
    AttachPoint {
        id,
        function,
        symbol,
        path: table.path().to_path_buf(),
        offset,
        pid,
    }
}

/// The first of the function's spellings the file defines, and its offset; or why not.
fn find(table: &SymbolTable, function: &'static Function) -> Result<(&'static str, u64), String> {
    let mut last = None;
    for symbol in function.symbols {
        match table.uprobe_offset(symbol) {
            Ok(offset) => return Ok((symbol, offset)),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(Error::NoSymbol { stripped: true, .. }) if function.internal => {
            "internal function, and the library is stripped of its symbol table (use a build from `tlsscope openssl build`)".to_string()
        }
        Some(Error::NoSymbol { .. }) => "not defined by this library version".to_string(),
        Some(e) => e.to_string(),
        None => "no symbol name to look for".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Group;

    fn system_libssl() -> PathBuf {
        let pid = std::process::id();
        // Load libssl into this test process so /proc/self/maps shows where it is.
        let _ = ossl::Library::load(&ossl::LibrarySource::System).expect("system OpenSSL loads");
        tls_libraries(pid)
            .unwrap()
            .into_iter()
            .find(|l| l.kind == LibraryKind::OpensslSsl)
            .expect("libssl mapped")
            .path
    }

    #[test]
    fn process_plan_finds_openssl_and_reports_stripped_internals() {
        let _ = system_libssl();
        let plan = Plan::new(&[Target::Pid(std::process::id())], Groups::all(), true).unwrap();
        let names: Vec<&str> = plan.points.iter().map(|p| p.function.name).collect();
        for want in [
            "SSL_do_handshake",
            "SSL_read_ex",
            "SSL_write",
            "SSL_get_error",
            "EVP_DigestSign",
            "EVP_PKEY_derive",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        let pid = i32::try_from(std::process::id()).unwrap();
        assert!(plan.points.iter().all(|p| p.pid == pid));
        // Debian's libcrypto is stripped: the internals are reported, with the reason.
        let rsa = plan
            .missing
            .iter()
            .find(|m| m.function == "rsa_ossl_private_decrypt")
            .expect("stripped internals are reported, not dropped");
        assert!(rsa.reason.contains("stripped"), "{}", rsa.reason);
    }

    #[test]
    fn library_plan_attaches_everywhere_and_respects_groups() {
        let libssl = system_libssl();
        let plan = Plan::new(
            &[Target::Library(libssl)],
            Groups::only(Group::Handshake),
            false,
        )
        .unwrap();
        assert!(plan.points.iter().all(|p| p.pid == -1));
        let names: Vec<&str> = plan.points.iter().map(|p| p.function.name).collect();
        assert!(names.contains(&"SSL_do_handshake"));
        assert!(
            !names.contains(&"SSL_read"),
            "io is not in the handshake group"
        );
    }

    #[test]
    fn named_functions_narrow_the_plan() {
        let _ = system_libssl();
        let only = vec!["SSL_read".to_string(), "EVP_PKEY_derive".to_string()];
        let pid = Target::Pid(std::process::id());
        let plan =
            Plan::with_functions(std::slice::from_ref(&pid), Groups::all(), &only, false).unwrap();
        let mut names: Vec<&str> = plan.points.iter().map(|p| p.function.name).collect();
        names.sort_unstable();
        assert_eq!(names, ["EVP_PKEY_derive", "SSL_read"]);
        let bad = vec!["SSL_reed".to_string()];
        let err = Plan::with_functions(&[pid], Groups::all(), &bad, false).unwrap_err();
        assert!(err.to_string().contains("SSL_reed"), "{err}");
    }

    #[test]
    fn a_binary_without_tls_functions_is_an_error() {
        let err =
            Plan::new(&[Target::Binary("/bin/true".into())], Groups::all(), false).unwrap_err();
        assert!(err.to_string().contains("defines none"), "{err}");
    }
}
