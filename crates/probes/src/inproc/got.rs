//! Where a running process calls the wrapped functions through a GOT: every loaded object's
//! `JUMP_SLOT` and `GLOB_DAT` relocations naming one, the entry's address in the process and
//! what it holds, and the real function each entry leads to. Swapping an entry for the
//! wrapper's address redirects the calls made through it; putting the original back undoes it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol, ObjectSymbolTable, RelocationFlags};

use super::inject::Failure;
use super::library::LIBRARY_FILE_PREFIX;
use crate::maps::parse_maps;

/// An ELF object loaded in a process, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    pub path: PathBuf,
    /// What to add to the file's virtual addresses to get the process's.
    pub bias: u64,
}

/// The ELF objects process `pid` maps (its executable, its libraries), each once, in the order
/// mapped; files replaced on disk since they were loaded are left out.
pub fn loaded(pid: u32) -> Result<Vec<Loaded>, Failure> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("cannot read its memory map: {e}"))?;
    let mut out: Vec<Loaded> = Vec::new();
    for m in parse_maps(&text) {
        let Some(path) = m.path else { continue };
        if m.offset != 0 || out.iter().any(|l| l.path == path) {
            continue;
        }
        if path.to_string_lossy().ends_with(" (deleted)") {
            continue;
        }
        let Ok(data) = std::fs::read(&path) else {
            continue;
        };
        let Ok(file) = object::File::parse(&*data) else {
            continue;
        };
        // The mapping at offset 0 holds the lowest loadable segment's page.
        let Some(low) = file.segments().map(|s| s.address()).min() else {
            continue;
        };
        out.push(Loaded {
            path,
            bias: m.start.wrapping_sub(low & !0xfff),
        });
    }
    Ok(out)
}

/// One GOT entry through which a wrapped function is called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The object whose GOT it is.
    pub object: PathBuf,
    pub address: u64,
    /// The function's index in `inproc_abi::FUNCTIONS`.
    pub index: usize,
    /// What the entry held when read.
    pub seen: u64,
    /// What belongs there: what it held (the real function, or the lazy binder's stub), or
    /// the real function where it held a wrapper that a killed run left.
    pub original: u64,
}

/// What redirecting a process takes.
#[derive(Debug, Default)]
pub struct Redirect {
    pub entries: Vec<Entry>,
    /// The real function of each table slot (`inproc_abi::REAL_TABLE`).
    pub reals: Vec<(usize, u64)>,
    /// Entries in objects other than the function's own library: the program's calls. The
    /// rest are a TLS library's calls of its own functions (`SSL_accept` calling
    /// `SSL_do_handshake`), which alone would show only part of the traffic.
    pub from_callers: usize,
    /// The functions (indexes) with at least one such entry: the ones the program's calls reach.
    pub called: Vec<usize>,
    /// The executable, if it defines a wanted function itself (TLS linked in statically).
    pub defining_executable: Option<(PathBuf, &'static str)>,
}

/// The GOT entries in process `pid` (its `objects`, from [`loaded`]) for functions `wanted` (indexes in
/// `inproc_abi::FUNCTIONS`), read through `read_u64`; objects in `skip` are not redirected.
pub fn find(
    pid: u32,
    objects: &[Loaded],
    wanted: &[usize],
    skip: &Path,
    read_u64: &dyn Fn(u64) -> Result<u64, Failure>,
) -> Result<Redirect, Failure> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mut names: HashMap<&'static str, usize> = wanted
        .iter()
        .filter_map(|&i| inproc_abi::FUNCTIONS.get(i).map(|f| (f.name, i)))
        .collect();
    for (h, name) in inproc_abi::HELPERS.iter().enumerate() {
        names.insert(name, inproc_abi::MAX_FUNCTIONS + h);
    }
    // Definitions of each name, in load order (the order the loader searches).
    let mut defined: HashMap<usize, Vec<u64>> = HashMap::new();
    let mut definers: Vec<(usize, &Path)> = Vec::new();
    let mut entries = Vec::new();
    let mut redirect = Redirect::default();
    for object in objects {
        if object.path == skip {
            continue;
        }
        let Ok(data) = std::fs::read(&object.path) else {
            continue;
        };
        let Ok(file) = object::File::parse(&*data) else {
            continue;
        };
        for symbol in file.dynamic_symbols() {
            let Ok(name) = symbol.name() else { continue };
            let Some(&slot) = names.get(name) else {
                continue;
            };
            if symbol.is_definition() && symbol.address() != 0 {
                defined
                    .entry(slot)
                    .or_default()
                    .push(object.bias.wrapping_add(symbol.address()));
                definers.push((slot, &object.path));
            }
        }
        if Some(&object.path) == exe.as_ref() && redirect.defining_executable.is_none() {
            // TLS linked into the program: its functions are in its full symbol table.
            redirect.defining_executable = file
                .symbols()
                .chain(file.dynamic_symbols())
                .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text)
                .find_map(|s| {
                    let slot = *names.get(s.name().ok()?)?;
                    (slot < inproc_abi::MAX_FUNCTIONS)
                        .then(|| (object.path.clone(), inproc_abi::FUNCTIONS[slot].name))
                });
        }
        let (Some(relocations), Some(symbols)) =
            (file.dynamic_relocations(), file.dynamic_symbol_table())
        else {
            continue;
        };
        for (offset, relocation) in relocations {
            let RelocationFlags::Elf { r_type } = relocation.flags() else {
                continue;
            };
            if r_type != object::elf::R_X86_64_JUMP_SLOT && r_type != object::elf::R_X86_64_GLOB_DAT
            {
                continue;
            }
            let object::RelocationTarget::Symbol(index) = relocation.target() else {
                continue;
            };
            let Some(name) = symbols
                .symbol_by_index(index)
                .ok()
                .and_then(|s| s.name().ok())
            else {
                continue;
            };
            match names.get(name) {
                Some(&slot) if slot < inproc_abi::MAX_FUNCTIONS => {
                    let address = object.bias.wrapping_add(offset);
                    let seen = read_u64(address)?;
                    entries.push(Entry {
                        object: object.path.clone(),
                        address,
                        index: slot,
                        seen,
                        original: seen,
                    });
                }
                _ => {}
            }
        }
    }
    // The real function of each: what its resolved entries hold (the first definition in
    // load order when none is resolved yet).
    for (&slot, addresses) in &defined {
        let resolved = entries
            .iter()
            .find(|e| e.index == slot && addresses.contains(&e.original))
            .map(|e| e.original);
        redirect
            .reals
            .push((slot, resolved.unwrap_or(addresses[0])));
    }
    redirect.reals.sort_unstable();
    // An entry that leads into a copy of tlsscope's library was swapped by a run that could
    // not put it back (killed): what belongs there is the real function.
    let ours = probe_library_ranges(pid)?;
    for e in &mut entries {
        if ours.iter().any(|r| r.contains(&e.original)) {
            if let Some(&(_, real)) = redirect.reals.iter().find(|r| r.0 == e.index) {
                e.original = real;
            }
        }
    }
    // Entries resolved to another definition (a second copy of the library) are left alone.
    redirect.entries = entries
        .into_iter()
        .filter(|e| {
            let real = redirect.reals.iter().find(|r| r.0 == e.index).map(|r| r.1);
            let elsewhere = defined
                .get(&e.index)
                .is_some_and(|d| d.contains(&e.original) && Some(e.original) != real);
            real.is_some() && !elsewhere
        })
        .collect();
    let from_callers: Vec<usize> = redirect
        .entries
        .iter()
        .filter(|e| !definers.contains(&(e.index, e.object.as_path())))
        .map(|e| e.index)
        .collect();
    redirect.from_callers = from_callers.len();
    redirect.called = from_callers;
    redirect.called.sort_unstable();
    redirect.called.dedup();
    Ok(redirect)
}

/// The address ranges of tlsscope's probe library (any build of it) in process `pid`.
fn probe_library_ranges(pid: u32) -> Result<Vec<std::ops::Range<u64>>, Failure> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("cannot read its memory map: {e}"))?;
    Ok(parse_maps(&text)
        .into_iter()
        .filter(|m| {
            m.path
                .as_ref()
                .and_then(|p| p.file_name())
                .is_some_and(|n| n.to_string_lossy().starts_with(LIBRARY_FILE_PREFIX))
        })
        .map(|m| m.start..m.end)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_s_own_objects_are_found_with_their_load_bias() {
        let pid = std::process::id();
        let objects = loaded(pid).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(objects.iter().any(|o| o.path == exe));
        let libc = objects
            .iter()
            .find(|o| o.path.to_string_lossy().contains("libc.so"))
            .expect("libc is loaded");
        // The bias plus getpid's address in the file is where this process calls it.
        let data = std::fs::read(&libc.path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let getpid = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok("getpid"))
            .unwrap()
            .address();
        assert_eq!(libc.bias + getpid, libc::getpid as *const () as u64);
    }
}
