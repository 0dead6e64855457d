//! Frames that tail calls hide, put back from the call instructions that led to them.
//!
//! A function that ends by calling another (`return f(x);`) is compiled to a jump, so its frame
//! is gone by the time anything under it is sampled: OpenSSL 3's `SSL_do_handshake` jumps to
//! the connection's handshake function, `SSL_CTX_new` to `SSL_CTX_new_ex`. A handshake's stacks
//! then go from the caller straight into the state machine, and the function the caller called
//! appears nowhere. The caller's return address still follows the call instruction that
//! entered the library, though. Where that instruction names its target (a direct call, a call
//! through the PLT, or through a GOT slot as `-fno-plt` code does), and the sampled callee is
//! not that target, the target is put back between the two, as a debugger does for tail calls.
//!
//! A call through a function pointer held in a register names no target. For callers whose
//! one call into the library is known (tlsscope's own OpenSSL wrappers, which call through the
//! table the library was loaded into), the caller says which function it calls.

use std::collections::HashMap;
use std::sync::Arc;

use object::{Object, ObjectSegment, ObjectSymbol, ObjectSymbolTable, RelocationFlags};

use crate::stacks::{Frame, Profile, Stack};

/// Where a frame's code lies: its address (a file offset, as `perf script` prints user
/// frames: the sampled instruction for the leaf, the return address less one for callers) and
/// the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    pub address: u64,
    pub path: Arc<str>,
}

/// What a call instruction leads to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// A function of the caller's own object.
    Local(String),
    /// A function imported through the PLT or a GOT slot: defined in another object.
    Import(String),
}

/// A loadable ELF file's code and what its calls can be resolved with.
struct Code {
    data: Vec<u8>,
    /// (file offset, virtual address, size in the file) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    /// Functions by start address (both symbol tables), and each name's extent.
    starts: HashMap<u64, String>,
    extents: HashMap<String, (u64, u64)>,
    /// The symbol each PLT/GOT slot is bound to, by the slot's virtual address.
    slots: HashMap<u64, String>,
}

impl Code {
    fn read(path: &str) -> Option<Code> {
        let data = std::fs::read(path).ok()?;
        Code::parse(data)
    }

    fn parse(data: Vec<u8>) -> Option<Code> {
        let file = object::File::parse(data.as_slice()).ok()?;
        let segments = file
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (offset, s.address(), size)
            })
            .collect();
        let mut starts = HashMap::new();
        let mut extents = HashMap::new();
        for s in file.symbols().chain(file.dynamic_symbols()) {
            if s.kind() != object::SymbolKind::Text || !s.is_definition() || s.address() == 0 {
                continue;
            }
            let Ok(name) = s.name() else { continue };
            starts
                .entry(s.address())
                .or_insert_with(|| name.to_string());
            extents
                .entry(name.to_string())
                .or_insert((s.address(), s.size()));
        }
        let mut slots = HashMap::new();
        if let (Some(relocations), Some(symbols)) =
            (file.dynamic_relocations(), file.dynamic_symbol_table())
        {
            for (slot, r) in relocations {
                let RelocationFlags::Elf { r_type } = r.flags() else {
                    continue;
                };
                if r_type != object::elf::R_X86_64_JUMP_SLOT
                    && r_type != object::elf::R_X86_64_GLOB_DAT
                {
                    continue;
                }
                let object::RelocationTarget::Symbol(index) = r.target() else {
                    continue;
                };
                if let Some(name) = symbols
                    .symbol_by_index(index)
                    .ok()
                    .and_then(|s| s.name().ok())
                {
                    slots.insert(slot, name.to_string());
                }
            }
        }
        Some(Code {
            data,
            segments,
            starts,
            extents,
            slots,
        })
    }

    fn to_address(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(o, _, size)| offset >= o && offset < o + size)
            .map(|&(o, address, _)| address + (offset - o))
    }

    fn to_offset(&self, address: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(_, a, size)| address >= a && address < a + size)
            .map(|&(o, a, _)| o + (address - a))
    }

    /// `len` bytes of code at virtual address `address`.
    fn bytes(&self, address: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(self.to_offset(address)?).ok()?;
        self.data.get(start..start.checked_add(len)?)
    }

    /// Whether the code at file offset `offset` lies in function `name` of this file.
    fn within(&self, name: &str, offset: u64) -> bool {
        let (Some(&(start, size)), Some(address)) =
            (self.extents.get(name), self.to_address(offset))
        else {
            return false;
        };
        address >= start && address < start + size.max(1)
    }

    /// The target of the call instruction that ends at `return_address` (a virtual address),
    /// where the instruction names it: `call rel32`, to a function or a PLT entry, or
    /// `call *disp32(%rip)` through a GOT slot. Calls through registers give None.
    fn call_target(&self, return_address: u64) -> Option<Target> {
        let before = return_address.checked_sub(6)?;
        let b = self.bytes(before, 6)?;
        let disp = |at: &[u8]| i64::from(i32::from_le_bytes([at[0], at[1], at[2], at[3]]));
        if b[1] == 0xe8 {
            let target = return_address.wrapping_add_signed(disp(&b[2..]));
            // A call into the middle of something is not a call: those bytes were something
            // else. Only a function's start or a PLT entry counts.
            if let Some(name) = self.starts.get(&target) {
                return Some(Target::Local(name.clone()));
            }
            return self.plt_entry(target).map(Target::Import);
        }
        if b[0] == 0xff && b[1] == 0x15 {
            let slot = return_address.wrapping_add_signed(disp(&b[2..]));
            return self.slots.get(&slot).cloned().map(Target::Import);
        }
        None
    }

    /// The symbol a PLT entry at `address` jumps to: `jmp *disp32(%rip)`, optionally after
    /// `endbr64` and a `bnd` prefix (the `.plt.sec` entries of CET-enabled programs).
    fn plt_entry(&self, address: u64) -> Option<String> {
        let b = self.bytes(address, 11)?;
        let mut at = 0;
        if b.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
            at += 4;
        }
        if b[at] == 0xf2 {
            at += 1;
        }
        if b[at..at + 2] != [0xff, 0x25] {
            return None;
        }
        let d = &b[at + 2..at + 6];
        let disp = i64::from(i32::from_le_bytes([d[0], d[1], d[2], d[3]]));
        let next = address + at as u64 + 6;
        self.slots.get(&next.wrapping_add_signed(disp)).cloned()
    }
}

/// Puts back tail-called functions in a profile's stacks.
pub struct Restorer<'a> {
    files: HashMap<Arc<str>, Option<Code>>,
    /// Callers whose call into another object is known: (caller, the function it calls).
    known: &'a [(&'a str, &'a str)],
}

impl<'a> Restorer<'a> {
    /// `known`: callers that call through a function pointer, and the one function of another
    /// object each calls (e.g. `("ossl::ssl::Ssl::do_handshake", "SSL_do_handshake")`).
    pub fn new(known: &'a [(&'a str, &'a str)]) -> Restorer<'a> {
        Restorer {
            files: HashMap::new(),
            known,
        }
    }

    /// Restores the frames of every stack of `profile`; returns how many it put back.
    pub fn restore(&mut self, profile: &mut Profile) -> u64 {
        let mut restored = 0;
        for stack in &mut profile.stacks {
            restored += self.restore_stack(stack);
        }
        profile.restored_frames += restored;
        restored
    }

    fn code(&mut self, path: &Arc<str>) -> Option<&Code> {
        self.files
            .entry(path.clone())
            .or_insert_with(|| Code::read(path))
            .as_ref()
    }

    fn restore_stack(&mut self, stack: &mut Stack) -> u64 {
        if stack.sites.len() != stack.frames.len() {
            return 0;
        }
        let mut frames = Vec::with_capacity(stack.frames.len() + 2);
        let mut sites = Vec::with_capacity(stack.sites.len() + 2);
        let mut restored = 0;
        for i in 0..stack.frames.len() {
            if i > 0 {
                if let Some(hidden) = self.hidden(
                    (&stack.frames[i], &stack.sites[i]),
                    (&stack.frames[i - 1], &stack.sites[i - 1]),
                ) {
                    frames.push(hidden);
                    // No code of its own was sampled: it stands where its callee does.
                    sites.push(stack.sites[i - 1].clone());
                    restored += 1;
                }
            }
            frames.push(stack.frames[i].clone());
            sites.push(stack.sites[i].clone());
        }
        stack.frames = frames;
        stack.sites = sites;
        restored
    }

    /// The function a tail call hid between `caller` and `callee`, if one did.
    fn hidden(&mut self, caller: (&Frame, &Site), callee: (&Frame, &Site)) -> Option<Frame> {
        // A kernel frame has no call instruction of ours; the first user frame under the
        // kernel is where a system call was made, not a return address.
        if caller.0.object == "kernel" || callee.0.object == "kernel" {
            return None;
        }
        let return_address = self
            .code(&caller.1.path)?
            .to_address(caller.1.address.checked_add(1)?)?;
        let (function, object) = match self.code(&caller.1.path)?.call_target(return_address) {
            Some(Target::Local(name)) => {
                // Rust and C++ names would need demangling to compare with perf's; their tail
                // calls are not what this is for.
                if name.starts_with("_Z") || name.starts_with("_R") {
                    return None;
                }
                (name, caller.0.object.clone())
            }
            Some(Target::Import(name)) if callee.0.object != caller.0.object => {
                (name, callee.0.object.clone())
            }
            Some(Target::Import(_)) => return None,
            None => {
                let caller_name = caller.0.function.as_deref()?;
                let &(_, name) = self
                    .known
                    .iter()
                    .find(|(c, _)| is_or_within(caller_name, c))?;
                if callee.0.object == caller.0.object {
                    return None;
                }
                (name.to_string(), callee.0.object.clone())
            }
        };
        if callee.0.function.as_deref() == Some(function.as_str()) {
            return None;
        }
        // perf may name the same code by an alias: the callee lying inside the target is no
        // tail call.
        if self
            .code(&callee.1.path)
            .is_some_and(|c| c.within(&function, callee.1.address))
        {
            return None;
        }
        Some(Frame {
            function: Some(function),
            object,
        })
    }
}

/// Whether `function` is `wrapper` or a closure of it (unoptimized builds keep closures as
/// functions of their own, and the call is then made from one).
fn is_or_within(function: &str, wrapper: &str) -> bool {
    function
        .strip_prefix(wrapper)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with("::{{closure}}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal code image: one segment mapping file offsets to addresses 0x1000 higher.
    fn image(code: &[(u64, &[u8])], starts: &[(u64, &str)], slots: &[(u64, &str)]) -> Code {
        let mut data = vec![0xccu8; 0x400];
        for &(address, bytes) in code {
            let at = (address - 0x1000) as usize;
            data[at..at + bytes.len()].copy_from_slice(bytes);
        }
        Code {
            data,
            segments: vec![(0, 0x1000, 0x400)],
            starts: starts.iter().map(|&(a, n)| (a, n.to_string())).collect(),
            extents: starts
                .iter()
                .map(|&(a, n)| (n.to_string(), (a, 0x20)))
                .collect(),
            slots: slots.iter().map(|&(a, n)| (a, n.to_string())).collect(),
        }
    }

    #[test]
    fn a_direct_call_names_a_function_start_and_nothing_else() {
        // call rel32 at 0x1100 (returns to 0x1105) to 0x1200 (0xfb after the return).
        let c = image(
            &[(0x1100, &[0xe8, 0xfb, 0x00, 0x00, 0x00])],
            &[(0x1200, "SSL_CTX_new")],
            &[],
        );
        assert_eq!(
            c.call_target(0x1105),
            Some(Target::Local("SSL_CTX_new".into()))
        );
        // The same bytes aimed one byte further: not a function's start.
        let c = image(
            &[(0x1100, &[0xe8, 0xfc, 0x00, 0x00, 0x00])],
            &[(0x1200, "SSL_CTX_new")],
            &[],
        );
        assert_eq!(c.call_target(0x1105), None);
    }

    #[test]
    fn a_call_through_the_plt_or_a_got_slot_names_the_imported_symbol() {
        let c = image(
            &[
                // call 0x1200 (a CET .plt.sec entry), returning to 0x1105.
                (0x1100, &[0xe8, 0xfb, 0x00, 0x00, 0x00]),
                // endbr64; bnd jmp *0x1f0(%rip): the slot at 0x120b + 0x1f0 = 0x13fb.
                (
                    0x1200,
                    &[
                        0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xf0, 0x01, 0x00, 0x00,
                    ],
                ),
                // call *0x100(%rip) returning to 0x1146: the slot at 0x1246.
                (0x1140, &[0xff, 0x15, 0x00, 0x01, 0x00, 0x00]),
                // call *%rax: no target in the instruction.
                (0x1180, &[0x90, 0x90, 0x90, 0x90, 0xff, 0xd0]),
            ],
            &[],
            &[(0x13fb, "SSL_do_handshake"), (0x1246, "SSL_read")],
        );
        assert_eq!(
            c.call_target(0x1105),
            Some(Target::Import("SSL_do_handshake".into()))
        );
        assert_eq!(
            c.call_target(0x1146),
            Some(Target::Import("SSL_read".into()))
        );
        assert_eq!(c.call_target(0x1186), None);
    }

    fn frame(function: Option<&str>, object: &str) -> Frame {
        Frame {
            function: function.map(str::to_string),
            object: object.into(),
        }
    }

    #[test]
    fn a_known_caller_gets_its_callee_back_unless_the_callee_is_it() {
        let known = [("ossl::ssl::Ssl::do_handshake", "SSL_do_handshake")];
        let mut r = Restorer::new(&known);
        // Files that do not exist: no call instruction to read, so only the known callers.
        let site = |address| Site {
            address,
            path: Arc::from("/nonexistent/tlsscope"),
        };
        r.files.insert(
            Arc::from("/nonexistent/tlsscope"),
            Some(image(
                &[(0x1180, &[0x90, 0x90, 0x90, 0x90, 0xff, 0xd0])],
                &[],
                &[],
            )),
        );
        let mut stack = Stack {
            pid: 1,
            tid: 1,
            frames: vec![
                frame(Some("EVP_DigestSignFinal"), "libcrypto"),
                frame(None, "libssl"),
                frame(Some("ossl::ssl::Ssl::do_handshake"), "tlsscope"),
                frame(Some("server::conn::Conn::drive"), "tlsscope"),
            ],
            sites: vec![site(0x80), site(0x90), site(0x185), site(0x300)],
            weight_ns: 1,
        };
        assert_eq!(r.restore_stack(&mut stack), 1);
        let names: Vec<_> = stack.frames.iter().map(Frame::label).collect();
        assert_eq!(
            names,
            [
                "EVP_DigestSignFinal (libcrypto)",
                "[unknown] (libssl)",
                "SSL_do_handshake (libssl)",
                "ossl::ssl::Ssl::do_handshake (tlsscope)",
                "server::conn::Conn::drive (tlsscope)",
            ]
        );
        // The same from a closure of the wrapper; not from a function that only shares the
        // start of its name.
        for (caller, restored) in [
            ("ossl::ssl::Ssl::do_handshake::{{closure}}", 1),
            ("ossl::ssl::Ssl::do_handshake_later", 0),
        ] {
            let mut s = Stack {
                pid: 1,
                tid: 1,
                frames: vec![frame(None, "libssl"), frame(Some(caller), "tlsscope")],
                sites: vec![site(0x90), site(0x185)],
                weight_ns: 1,
            };
            assert_eq!(r.restore_stack(&mut s), restored, "{caller}");
        }
        // Already there: nothing to put back.
        stack.frames.remove(1);
        stack.sites.remove(1);
        assert_eq!(r.restore_stack(&mut stack), 0);
    }
}
