//! Where on a function its uprobe + uretprobe pair goes. A uprobe costs a breakpoint trap, and
//! then the probed instruction has to run: most instructions are single-stepped out of line (a
//! second trap, 13-25 us a hit on a VM), a few the kernel emulates instead. So the probes go on
//! an instruction the kernel emulates where one is as good as the entry:
//!
//! - the entry itself, when it is one (`push %reg`, a NOP, a relative call or jump);
//! - the instruction after an `endbr64` at the entry: `endbr64` is single-stepped, and leaves the
//!   stack alone, so the return address is still at `(%rsp)` for the uretprobe;
//! - the first callee, when the function begins with a direct call to a function whose entry is
//!   emulated, reached with the function's own first argument, after only instructions this
//!   module can reason about. The probes there see every call of the callee; the BPF program
//!   keeps those whose return address lies right after the function's call instruction, and
//!   turns the callee's result into the function's with the rules read from the function's code
//!   after the call ([`ResultRule`]).
//!
//! Otherwise the probes stay at the entry, single-stepped. Facts relied on, from the kernel's
//! `arch/x86/kernel/uprobes.c`: `push_setup_xol_ops` emulates `push` of a 64-bit register (one
//! byte 0x50-0x57, or 0x41 then 0x50-0x57 for %r8-%r15); `branch_setup_xol_ops` emulates `call`
//! rel32, `jmp` rel8/rel32 and `jcc` (not with a 0x66 prefix) and `nop` (0x90 with prefixes,
//! and since 6.16 the canonical multi-byte NOPs of `x86_nops`); `endbr64` is in neither. For a
//! uprobe the handler runs with `ip` set to the probed address (`handle_swbp`); for a uretprobe
//! `ip` holds the original return address and `sp` is just past it (`handle_trampoline`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};
use object::{Object, ObjectSegment};

use crate::catalog::Semantics;
use crate::plan::{CalleeSite, Placement, PlacementMode, Plan, ResultRule, ENDBR64_LEN};
use crate::Error;

/// Instructions read before a function's first call, at most.
const MAX_PREFIX: usize = 16;
/// Instructions followed from the call to a `ret`, at most, per callee result.
const MAX_EPILOGUE: usize = 32;
/// Bytes decoded from a function's start.
const WINDOW: usize = 256;

/// What the running kernel emulates beyond `push`, relative branches and `0x90`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The canonical NOPs of 2 to 8 bytes (`x86_nops`), emulated since Linux 6.16.
    pub long_nops: bool,
}

impl Kernel {
    /// The running kernel, from its release.
    pub fn running() -> Kernel {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Kernel {
            long_nops: at_least(&release, (6, 16)),
        }
    }
}

/// Whether a release such as "6.18.44-fc" is at least `major.minor`.
fn at_least(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let have = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    have >= (major, minor)
}

/// The loadable bytes of an ELF file, and how its addresses map to file offsets.
pub struct Code {
    path: PathBuf,
    data: Vec<u8>,
    /// (virtual address, file offset, bytes in the file) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

impl Code {
    /// Reads `path`.
    pub fn read(path: &Path) -> Result<Code, Error> {
        let data = std::fs::read(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let segments = {
            let file = object::File::parse(&*data).map_err(|e| Error::NotElf {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
            file.segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (s.address(), offset, size)
                })
                .collect()
        };
        Ok(Code {
            path: path.to_path_buf(),
            data,
            segments,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn address_of(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(_, start, size)| offset >= start && offset < start + size)
            .map(|&(address, start, _)| address + (offset - start))
    }

    fn offset_of(&self, address: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(start, _, size)| address >= start && address < start + size)
            .map(|&(start, offset, _)| offset + (address - start))
    }

    /// A decoder over the bytes at file offset `offset`, with addresses as the file has them.
    fn decoder_at(&self, offset: u64) -> Option<Decoder<'_>> {
        let address = self.address_of(offset)?;
        let start = usize::try_from(offset).ok()?;
        let end = start.saturating_add(WINDOW).min(self.data.len());
        let bytes = self.data.get(start..end)?;
        Some(Decoder::with_ip(64, bytes, address, DecoderOptions::NONE))
    }

    /// The instruction at `address` and its bytes.
    fn instruction_at(&self, address: u64) -> Option<(Instruction, &[u8])> {
        let offset = self.offset_of(address)?;
        let instruction = self.decoder_at(offset)?.decode();
        if instruction.is_invalid() {
            return None;
        }
        let start = usize::try_from(offset).ok()?;
        Some((instruction, &self.data[start..start + instruction.len()]))
    }
}

/// Where the probes of the function at file offset `entry` go.
pub fn place(code: &Code, entry: u64, semantics: Semantics, kernel: Kernel) -> Placement {
    let Some(address) = code.address_of(entry) else {
        return Placement::Entry { emulated: false };
    };
    match emulated_start(code, address, kernel) {
        Some(0) => return Placement::Entry { emulated: true },
        Some(_) => return Placement::AfterEndbr,
        None => {}
    }
    if callee_semantics(semantics) {
        if let Some(site) = callee_site(code, address, kernel) {
            return Placement::Callee(site);
        }
    }
    Placement::Entry { emulated: false }
}

/// Semantics whose result is a C int, which [`ResultRule`]s can compute.
fn callee_semantics(semantics: Semantics) -> bool {
    matches!(
        semantics,
        Semantics::OpensslIo
            | Semantics::OpensslShutdown
            | Semantics::Positive
            | Semantics::NonNegative
    )
}

/// Whether the kernel emulates the first instruction of the function at file offset `entry`.
pub fn entry_emulated(code: &Code, entry: u64, kernel: Kernel) -> bool {
    code.address_of(entry)
        .is_some_and(|address| emulated_start(code, address, kernel) == Some(0))
}

/// How far into the function at `address` the first emulated instruction is, when that is
/// as good as the entry: 0 (the entry itself) or past an `endbr64`.
fn emulated_start(code: &Code, address: u64, kernel: Kernel) -> Option<u64> {
    let (first, bytes) = code.instruction_at(address)?;
    if emulated(bytes, kernel) {
        return Some(0);
    }
    if first.mnemonic() != Mnemonic::Endbr64 {
        return None;
    }
    let (_, next) = code.instruction_at(first.next_ip())?;
    emulated(next, kernel).then_some(ENDBR64_LEN)
}

/// Whether the kernel emulates the instruction `bytes` instead of single-stepping it.
pub fn emulated(bytes: &[u8], kernel: Kernel) -> bool {
    emulated_push(bytes) || emulated_nop(bytes, kernel) || emulated_branch(bytes)
}

/// `push_setup_xol_ops`: push of a 64-bit register, with no prefix but REX.B (0x41).
fn emulated_push(bytes: &[u8]) -> bool {
    match bytes {
        [op] => (0x50..=0x57).contains(op),
        [0x41, op] => (0x50..=0x57).contains(op),
        _ => false,
    }
}

/// The canonical NOPs (`x86_nops`, 1 to 8 bytes), and 0x90 after any prefixes.
fn emulated_nop(bytes: &[u8], kernel: Kernel) -> bool {
    const NOPS: [&[u8]; 7] = [
        &[0x66, 0x90],
        &[0x0f, 0x1f, 0x00],
        &[0x0f, 0x1f, 0x40, 0x00],
        &[0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
        &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
    ];
    // Prefixed 0x90 is left out: `rep nop` is `pause`, which newer kernels do not count.
    bytes == [0x90] || (kernel.long_nops && NOPS.contains(&bytes))
}

/// `branch_setup_xol_ops`: call rel32, jmp rel8/rel32, jcc rel8/rel32. Prefixed forms (which
/// the kernel takes but for 0x66) are left out: compilers do not emit them at entries.
fn emulated_branch(bytes: &[u8]) -> bool {
    match bytes {
        [0xe8 | 0xe9, _, _, _, _] | [0xeb, _] => true,
        [op, _] => (0x70..=0x7f).contains(op),
        [0x0f, op, _, _, _, _] => (0x80..=0x8f).contains(op),
        _ => false,
    }
}

/// The 16 general registers by hardware number (rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi,
/// r8-r15), and whether `register` is the 64-bit or the 32-bit name.
fn gpr(register: Register) -> Option<(usize, Width)> {
    let n = register as usize;
    let (eax, rax) = (Register::EAX as usize, Register::RAX as usize);
    if (rax..rax + 16).contains(&n) {
        Some((n - rax, Width::Full))
    } else if (eax..eax + 16).contains(&n) {
        Some((n - eax, Width::Low32))
    } else {
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    Full,
    Low32,
}

/// The registers of arguments 0 to 5 (rdi, rsi, rdx, rcx, r8, r9), by hardware number.
const ARG_REGS: [usize; 6] = [7, 6, 2, 1, 8, 9];

const RAX: usize = 0;
const RCX: usize = 1;
const RSP: usize = 4;
const RDI: usize = 7;

/// A register's value before the call, as far as it matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Before {
    /// The function's argument `n` (0: rdi, 1: rsi, 2: rdx, 3: rcx, 4: r8, 5: r9).
    Arg(u8),
    /// The address `k` bytes from %rsp at the function's entry.
    Stack(i64),
    /// The low half of argument `n`, sign- or zero-extended: zero exactly when that half is.
    Widened(u8),
    Other,
}

/// The function's first call, and what the code before it allows.
struct FirstCall {
    /// The call instruction's next address (the return address) and its target.
    return_address: u64,
    callee: u64,
    /// %rsp at the call, from %rsp at the entry.
    rsp: i64,
    /// Where the fourth argument points, from %rsp at the entry, if on the stack.
    out_slot: Option<i64>,
    unseen: Option<String>,
    /// Which of the function's arguments the call gets in the same registers.
    passes_on: [bool; 6],
    /// Which it gets passed on or widened from their low half.
    zero_alike: [bool; 6],
}

/// The callee placement of the function at `address`, if it has one.
fn callee_site(code: &Code, address: u64, kernel: Kernel) -> Option<CalleeSite> {
    let call = first_call(code, address)?;
    let skip = emulated_start(code, call.callee, kernel)?;
    let probe_address = call.callee + skip;
    let results = [Class::Positive, Class::Zero, Class::Negative]
        .map(|class| result_after_call(code, &call, class));
    let [Some(positive), Some(zero), Some(negative)] = results else {
        return None;
    };
    Some(CalleeSite {
        probe_offset: code.offset_of(probe_address)?,
        return_delta: call.return_address.wrapping_sub(probe_address) as i64,
        results: [positive, zero, negative],
        unseen: call.unseen,
        passes_on: call.passes_on,
        zero_alike: call.zero_alike,
    })
}

/// Reads the function from its entry to its first call, keeping track of the registers, and
/// returns the call when everything before it is understood: stack set-up, the stack guard,
/// moves, and at most argument checks that branch away for good.
fn first_call(code: &Code, address: u64) -> Option<FirstCall> {
    let mut decoder = code.decoder_at(code.offset_of(address)?)?;
    let mut regs: [Before; 16] =
        std::array::from_fn(|i| match ARG_REGS.iter().position(|&r| r == i) {
            Some(n) => Before::Arg(n as u8),
            None => Before::Other,
        });
    let mut rsp = 0i64;
    let mut tested: Option<Before> = None;
    let mut exits: Vec<(u64, u64, u8)> = Vec::new();
    for _ in 0..MAX_PREFIX {
        let i = decoder.decode();
        match i.mnemonic() {
            Mnemonic::Endbr64 if i.ip() == address => {}
            Mnemonic::Push if reg_op(&i, 0).is_some_and(|(_, w)| w == Width::Full) => rsp -= 8,
            Mnemonic::Sub | Mnemonic::Add if is_rsp(&i) => rsp += stack_adjust(&i)?,
            Mnemonic::Mov | Mnemonic::Lea | Mnemonic::Movsxd | Mnemonic::Xor => {
                assign_before(&i, &mut regs, rsp)?
            }
            Mnemonic::Test => tested = test_operand(&i).map(|r| regs[r]),
            Mnemonic::Call if i.op0_kind() == OpKind::NearBranch64 => {
                if regs[RDI] != Before::Arg(0) {
                    return None;
                }
                if exits.iter().any(|&(_, target, _)| target < i.next_ip()) {
                    return None; // a branch that rejoins before the call
                }
                return Some(FirstCall {
                    return_address: i.next_ip(),
                    callee: i.near_branch_target(),
                    rsp,
                    out_slot: match regs[RCX] {
                        Before::Stack(k) => Some(k),
                        _ => None,
                    },
                    unseen: unseen_words(address, &exits),
                    passes_on: std::array::from_fn(|n| regs[ARG_REGS[n]] == Before::Arg(n as u8)),
                    zero_alike: std::array::from_fn(
                        |n| matches!(regs[ARG_REGS[n]], Before::Arg(a) | Before::Widened(a) if a == n as u8),
                    ),
                });
            }
            m if is_jcc(m) => match tested {
                // An argument check: the branch depends on an argument alone.
                Some(Before::Arg(n)) if exits.is_empty() => {
                    exits.push((i.ip(), i.near_branch_target(), n))
                }
                _ => return None,
            },
            _ => return None,
        }
    }
    None
}

/// A move, address or zeroing before the call: what the destination register holds after.
fn assign_before(i: &Instruction, regs: &mut [Before; 16], rsp: i64) -> Option<()> {
    if i.op0_kind() == OpKind::Memory {
        // A store: only to the stack (spills, the stack guard).
        return (i.memory_base() == Register::RSP).then_some(());
    }
    let (dst, width) = reg_op(i, 0)?;
    if dst == RSP {
        return None;
    }
    let value = match (i.mnemonic(), i.op1_kind()) {
        (Mnemonic::Xor, _) => Before::Other,
        (Mnemonic::Lea, OpKind::Memory) if i.memory_base() == Register::RSP => {
            if i.memory_index() != Register::None {
                return None;
            }
            Before::Stack(rsp + i.memory_displacement64() as i64)
        }
        (Mnemonic::Lea, _) => Before::Other,
        (Mnemonic::Mov, OpKind::Register) if width == Width::Full => match reg_op(i, 1)? {
            (RSP, _) => Before::Stack(rsp),
            (src, _) => regs[src],
        },
        // `movslq %edx,%rdx`, `mov %edx,%edx`: an argument's low half, widened.
        (Mnemonic::Movsxd | Mnemonic::Mov, OpKind::Register) => match reg_op(i, 1)? {
            (src, Width::Low32) => match regs[src] {
                Before::Arg(n) | Before::Widened(n) => Before::Widened(n),
                _ => Before::Other,
            },
            _ => Before::Other,
        },
        // Loads and the rest: nothing the call's arguments can rely on.
        _ => Before::Other,
    };
    regs[dst] = value;
    Some(())
}

/// "calls whose argument 3 fails the check at SSL_read+0x6 ...".
fn unseen_words(entry: u64, exits: &[(u64, u64, u8)]) -> Option<String> {
    exits.first().map(|&(at, _, n)| {
        format!(
            "calls whose argument {} fails the check at +{:#x} return before the probed call and are not seen",
            n + 1,
            at - entry
        )
    })
}

/// How the callee's result is classed when following the function's code after the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Positive,
    Zero,
    Negative,
}

/// A register's value after the call, for one class of the callee's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Callee,
    Constant(i64),
    OutInt,
    Other,
}

/// The flags, as the conditions after the call can read them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flags {
    /// Set by `test x, x` of a value whose sign is known (CF = OF = 0).
    Sign(Class),
    /// Set by comparing the stack guard with its copy: equal, unless the stack was smashed
    /// (and then the process aborts in `__stack_chk_fail`).
    GuardIntact,
    Unknown,
}

/// What the function returns when its callee's result is of `class`: follows the code after
/// the call to a `ret`, taking every branch as the class decides.
fn result_after_call(code: &Code, call: &FirstCall, class: Class) -> Option<ResultRule> {
    let mut regs = [After::Other; 16];
    regs[RAX] = After::Callee;
    let mut rsp = call.rsp;
    let mut flags = Flags::Unknown;
    let mut at = call.return_address;
    for _ in 0..MAX_EPILOGUE {
        let (i, _) = code.instruction_at(at)?;
        at = i.next_ip();
        match i.mnemonic() {
            Mnemonic::Ret => return rule_of(regs[RAX]),
            Mnemonic::Test => {
                let value = regs[test_operand(&i)?];
                flags = Flags::Sign(sign_of(value, class)?);
            }
            Mnemonic::Sub | Mnemonic::Xor if reads_guard(&i) => flags = Flags::GuardIntact,
            Mnemonic::Sub | Mnemonic::Add if is_rsp(&i) => rsp += stack_adjust(&i)?,
            Mnemonic::Pop => {
                let (r, _) = reg_op(&i, 0)?;
                regs[r] = After::Other;
                rsp += 8;
            }
            Mnemonic::Jmp => at = i.near_branch_target(),
            m if is_jcc(m) => {
                if taken(m, flags)? {
                    at = i.near_branch_target();
                }
            }
            m if is_cmov(m) => {
                if taken(m, flags)? {
                    regs[reg_op(&i, 0)?.0] = regs[reg_op(&i, 1)?.0];
                }
            }
            Mnemonic::Mov | Mnemonic::Xor | Mnemonic::Cdqe => {
                assign_after(&i, &mut regs, rsp, call.out_slot)?
            }
            _ => return None,
        }
    }
    None
}

fn rule_of(value: After) -> Option<ResultRule> {
    match value {
        After::Callee => Some(ResultRule::Callee),
        After::OutInt => Some(ResultRule::OutInt),
        After::Constant(c) => i32::try_from(c).ok().map(ResultRule::Constant),
        After::Other => None,
    }
}

fn sign_of(value: After, class: Class) -> Option<Class> {
    match value {
        After::Callee => Some(class),
        After::Constant(c) => Some(match c {
            0 => Class::Zero,
            c if c > 0 => Class::Positive,
            _ => Class::Negative,
        }),
        _ => None,
    }
}

/// A move or zeroing after the call.
fn assign_after(
    i: &Instruction,
    regs: &mut [After; 16],
    rsp: i64,
    out_slot: Option<i64>,
) -> Option<()> {
    if i.mnemonic() == Mnemonic::Cdqe {
        return Some(()); // rax from eax: the int is the same
    }
    if i.op0_kind() == OpKind::Memory {
        return None;
    }
    let (dst, width) = reg_op(i, 0)?;
    if dst == RSP {
        return None;
    }
    let value = match (i.mnemonic(), i.op1_kind()) {
        (Mnemonic::Xor, OpKind::Register) if reg_op(i, 1)?.0 == dst => After::Constant(0),
        (Mnemonic::Mov, OpKind::Register) => regs[reg_op(i, 1)?.0],
        (Mnemonic::Mov, OpKind::Immediate32 | OpKind::Immediate32to64) => {
            After::Constant(i.immediate(1) as i32 as i64)
        }
        (Mnemonic::Mov, OpKind::Memory) if width == Width::Low32 => {
            let slot = stack_slot(i, rsp)?;
            if Some(slot) == out_slot {
                After::OutInt
            } else {
                After::Other
            }
        }
        // The stack guard's copy, loaded to be compared.
        (Mnemonic::Mov, OpKind::Memory) if stack_slot(i, rsp).is_some() => After::Other,
        _ => return None,
    };
    regs[dst] = value;
    Some(())
}

/// `[rsp + d]` as an offset from %rsp at the function's entry.
fn stack_slot(i: &Instruction, rsp: i64) -> Option<i64> {
    (i.memory_base() == Register::RSP && i.memory_index() == Register::None)
        .then(|| rsp + i.memory_displacement64() as i64)
}

/// `sub reg, %fs:0x28` or `xor reg, %fs:0x28`: the stack guard check.
fn reads_guard(i: &Instruction) -> bool {
    i.op1_kind() == OpKind::Memory && i.memory_segment() == Register::FS
}

fn is_rsp(i: &Instruction) -> bool {
    i.op0_kind() == OpKind::Register && i.op0_register() == Register::RSP
}

/// The change to %rsp of `sub rsp, imm` / `add rsp, imm`.
fn stack_adjust(i: &Instruction) -> Option<i64> {
    if !matches!(
        i.op1_kind(),
        OpKind::Immediate8to64 | OpKind::Immediate32to64
    ) {
        return None;
    }
    let n = i.immediate(1) as i64;
    Some(if i.mnemonic() == Mnemonic::Sub { -n } else { n })
}

/// The register of operand `n`, if it is a general register.
fn reg_op(i: &Instruction, n: u32) -> Option<(usize, Width)> {
    if i.op_kind(n) != OpKind::Register {
        return None;
    }
    gpr(i.op_register(n))
}

/// The register `test x, x` tests (the same one twice).
fn test_operand(i: &Instruction) -> Option<usize> {
    let (a, _) = reg_op(i, 0)?;
    let (b, _) = reg_op(i, 1)?;
    (a == b).then_some(a)
}

fn is_jcc(m: Mnemonic) -> bool {
    condition(m).is_some()
}

fn is_cmov(m: Mnemonic) -> bool {
    cmov_condition(m).is_some()
}

/// Whether the branch or move is taken under `flags`; None when the flags are not known.
fn taken(m: Mnemonic, flags: Flags) -> Option<bool> {
    let cond = condition(m).or_else(|| cmov_condition(m))?;
    match flags {
        Flags::Sign(class) => Some(cond.holds(class)),
        Flags::GuardIntact => match cond {
            Condition::Equal => Some(true),
            Condition::NotEqual => Some(false),
            _ => None,
        },
        Flags::Unknown => None,
    }
}

/// A condition, for flags from `test x, x` (CF = OF = 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Condition {
    Equal,
    NotEqual,
    Sign,
    NotSign,
    LessOrEqual,
    Greater,
    /// Below (never, CF = 0).
    Never,
    /// Above or equal (always).
    Always,
}

impl Condition {
    fn holds(self, class: Class) -> bool {
        match self {
            Condition::Equal => class == Class::Zero,
            Condition::NotEqual => class != Class::Zero,
            Condition::Sign => class == Class::Negative,
            Condition::NotSign => class != Class::Negative,
            Condition::LessOrEqual => class != Class::Positive,
            Condition::Greater => class == Class::Positive,
            Condition::Never => false,
            Condition::Always => true,
        }
    }
}

fn condition(m: Mnemonic) -> Option<Condition> {
    use Mnemonic::*;
    Some(match m {
        Je => Condition::Equal,
        Jne => Condition::NotEqual,
        Js | Jl => Condition::Sign,
        Jns | Jge => Condition::NotSign,
        Jle | Jbe => Condition::LessOrEqual,
        Jg => Condition::Greater,
        Ja => Condition::NotEqual,
        Jb => Condition::Never,
        Jae => Condition::Always,
        _ => return None,
    })
}

fn cmov_condition(m: Mnemonic) -> Option<Condition> {
    use Mnemonic::*;
    Some(match m {
        Cmove => Condition::Equal,
        Cmovne => Condition::NotEqual,
        Cmovs | Cmovl => Condition::Sign,
        Cmovns | Cmovge => Condition::NotSign,
        Cmovle | Cmovbe => Condition::LessOrEqual,
        Cmovg => Condition::Greater,
        Cmova => Condition::NotEqual,
        Cmovb => Condition::Never,
        Cmovae => Condition::Always,
        _ => return None,
    })
}

impl Plan {
    /// The plan with its probes placed as `mode` says, from the code of each point's file (a
    /// new plan has them at the entries, not yet told whether the kernel emulates those).
    pub fn with_placement(mut self, mode: PlacementMode) -> Plan {
        self.place_points(mode);
        self
    }

    /// Decides every point's placement from the code of its file.
    fn place_points(&mut self, mode: PlacementMode) {
        let kernel = Kernel::running();
        let mut files = Files::default();
        for p in &mut self.points {
            // Go's functions are probed at their entry and returns (planned with them).
            if matches!(p.placement, Placement::GoExits { .. }) {
                continue;
            }
            p.placement = match (files.code(&p.path), mode) {
                (None, _) => Placement::Entry { emulated: false },
                (Some(code), PlacementMode::Entry) => Placement::Entry {
                    emulated: entry_emulated(code, p.offset, kernel),
                },
                (Some(code), PlacementMode::Emulated) => {
                    place(code, p.offset, p.function.semantics, kernel)
                }
            };
        }
        self.keep_shared_breakpoints_apart();
    }

    /// A callee that another point probes as itself (or at its own entry): both programs would
    /// run at the one breakpoint in either order, and their call frames with them. The function
    /// probed through that callee goes back to its entry.
    fn keep_shared_breakpoints_apart(&mut self) {
        let own: Vec<(PathBuf, u64)> = self
            .points
            .iter()
            .filter(|p| !matches!(p.placement, Placement::Callee(_)))
            .map(|p| (p.path.clone(), p.probe_offset()))
            .collect();
        for p in &mut self.points {
            if let Placement::Callee(site) = &p.placement {
                if own.contains(&(p.path.clone(), site.probe_offset)) {
                    p.placement = Placement::Entry { emulated: false };
                }
            }
        }
    }
}

/// The ELF files of a plan, read once each.
#[derive(Default)]
struct Files {
    read: HashMap<PathBuf, Option<Code>>,
}

impl Files {
    /// The code of `path`, or None when it cannot be read (the probes then stay at the entry).
    pub fn code(&mut self, path: &Path) -> Option<&Code> {
        self.read
            .entry(path.to_path_buf())
            .or_insert_with(|| Code::read(path).ok())
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEW: Kernel = Kernel { long_nops: true };
    const OLD: Kernel = Kernel { long_nops: false };

    #[test]
    fn the_kernel_s_emulated_instructions() {
        assert!(emulated(&[0x53], OLD), "push %rbx");
        assert!(emulated(&[0x41, 0x55], OLD), "push %r13");
        assert!(!emulated(&[0x48, 0x53], OLD), "REX.W push: not emulated");
        assert!(!emulated(&[0x48, 0x83, 0xec, 0x18], NEW), "sub $0x18,%rsp");
        assert!(!emulated(&[0xf3, 0x0f, 0x1e, 0xfa], NEW), "endbr64");
        assert!(
            emulated(&[0x90], OLD) && !emulated(&[0xf3, 0x90], NEW),
            "nop, not pause"
        );
        assert!(emulated(&[0x0f, 0x1f, 0x44, 0x00, 0x00], NEW));
        assert!(
            !emulated(&[0x0f, 0x1f, 0x44, 0x00, 0x00], OLD),
            "before 6.16"
        );
        assert!(emulated(&[0xe8, 1, 2, 3, 4], OLD), "call rel32");
        assert!(emulated(&[0x7e, 0x03], OLD), "jle rel8");
        assert!(emulated(&[0x0f, 0x84, 1, 2, 3, 4], OLD), "je rel32");
        assert!(!emulated(&[0x66, 0xe8, 1, 2], OLD), "callw");
    }

    #[test]
    fn releases_compare_by_major_and_minor() {
        assert!(at_least("6.18.44-fc-v595\n", (6, 16)));
        assert!(at_least("7.0", (6, 16)));
        assert!(!at_least("6.15.2", (6, 16)));
        assert!(!at_least("garbage", (6, 16)));
    }

    /// A one-segment "file" whose bytes start at address 0x1000.
    fn code(bytes: &[u8]) -> Code {
        Code {
            path: PathBuf::from("/synthetic"),
            data: bytes.to_vec(),
            segments: vec![(0x1000, 0, bytes.len() as u64)],
        }
    }

    #[test]
    fn endbr64_then_push_is_probed_four_bytes_in() {
        // endbr64; push %rbx; mov %edi,%eax; pop %rbx; ret
        let c = code(&[0xf3, 0x0f, 0x1e, 0xfa, 0x53, 0x89, 0xf8, 0x5b, 0xc3]);
        let p = place(&c, 0, Semantics::Positive, NEW);
        assert_eq!(p, Placement::AfterEndbr);
        assert_eq!(p.probe_offset(0), 4);
        // endbr64; sub $8,%rsp: nothing emulated early enough.
        let c = code(&[0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x08, 0xc3]);
        assert_eq!(
            place(&c, 0, Semantics::Positive, NEW),
            Placement::Entry { emulated: false }
        );
    }

    /// SSL_read_ex as 1.1.1w builds it, with its callee at +0x20 starting with push %r13.
    fn read_ex_like() -> Vec<u8> {
        let mut b = vec![
            0x48, 0x83, 0xec, 0x08, // sub $0x8,%rsp
            0xe8, 0x17, 0x00, 0x00, 0x00, // call +0x20
            0x31, 0xd2, // xor %edx,%edx
            0x85, 0xc0, // test %eax,%eax
            0x0f, 0x48, 0xc2, // cmovs %edx,%eax
            0x48, 0x83, 0xc4, 0x08, // add $0x8,%rsp
            0xc3, // ret
        ];
        b.resize(0x20, 0xcc);
        b.extend([0x41, 0x55, 0x31, 0xc0, 0x41, 0x5d, 0xc3]); // push %r13; xor; pop; ret
        b
    }

    #[test]
    fn a_leading_call_to_a_push_is_probed_at_the_callee() {
        let c = code(&read_ex_like());
        let Placement::Callee(site) = place(&c, 0, Semantics::OpensslIo, NEW) else {
            panic!("callee placement expected");
        };
        assert_eq!(site.probe_offset, 0x20);
        assert_eq!(site.return_delta, 0x9 - 0x20);
        use ResultRule::*;
        assert_eq!(site.results, [Callee, Callee, Constant(0)]);
        assert_eq!(site.unseen, None);
        // GnuTLS returns ssize_t: not computed from an int callee.
        assert_eq!(
            place(&c, 0, Semantics::GnuTls, NEW),
            Placement::Entry { emulated: false }
        );
    }

    #[test]
    fn a_byte_count_through_the_fourth_argument_and_an_argument_check() {
        // SSL_read as 3.0.2 builds it.
        let mut b = vec![
            0x48, 0x83, 0xec, 0x18, // sub $0x18,%rsp
            0x85, 0xd2, // test %edx,%edx
            0x78, 0x1a, // js +0x22
            0x48, 0x8d, 0x4c, 0x24, 0x08, // lea 0x8(%rsp),%rcx
            0x48, 0x63, 0xd2, // movslq %edx,%rdx
            0xe8, 0x2b, 0x00, 0x00, 0x00, // call +0x40
            0x85, 0xc0, // test %eax,%eax
            0x7e, 0x04, // jle +0x1d
            0x8b, 0x44, 0x24, 0x08, // mov 0x8(%rsp),%eax
            0x48, 0x83, 0xc4, 0x18, // add $0x18,%rsp
            0xc3, // ret
        ];
        b.resize(0x40, 0xcc);
        b.extend([0x41, 0x55, 0x41, 0x5d, 0xc3]);
        let c = code(&b);
        let Placement::Callee(site) = place(&c, 0, Semantics::OpensslIo, NEW) else {
            panic!("callee placement expected");
        };
        use ResultRule::*;
        assert_eq!(site.results, [OutInt, Callee, Callee]);
        // The count asked for is widened, not passed as it is: zero exactly when it is.
        assert!(!site.passes_on(2) && site.zero_alike(2));
        assert!(site.passes_on(0) && site.zero_alike(0));
        // Widened from another argument's low half: no longer the function's count.
        let mut other = b.clone();
        other[15] = 0xd6; // movslq %esi,%rdx
        let Placement::Callee(widened_other) = place(&code(&other), 0, Semantics::OpensslIo, NEW)
        else {
            panic!("callee placement expected");
        };
        assert!(!widened_other.zero_alike(2));
        let unseen = site.unseen.expect("the length check is reported");
        assert!(
            unseen.contains("argument 3") && unseen.contains("+0x6"),
            "{unseen}"
        );
    }

    #[test]
    fn a_call_after_unknown_code_stays_at_the_entry() {
        // cmpq $0,0x30(%rdi); je; call: the branch depends on memory, not an argument.
        let mut b = vec![
            0x48, 0x83, 0x7f, 0x30, 0x00, // cmpq $0x0,0x30(%rdi)
            0x74, 0x10, // je
            0xe8, 0x14, 0x00, 0x00, 0x00, // call +0x20
            0xc3,
        ];
        b.resize(0x20, 0xcc);
        b.extend([0x53, 0x5b, 0xc3]);
        assert_eq!(
            place(&code(&b), 0, Semantics::OpensslIo, NEW),
            Placement::Entry { emulated: false }
        );
    }

    #[test]
    fn modes_parse() {
        assert_eq!("entry".parse(), Ok(PlacementMode::Entry));
        assert_eq!("emulated".parse(), Ok(PlacementMode::Emulated));
        let err = "callee".parse::<PlacementMode>().unwrap_err();
        assert!(err.contains("emulated, entry"), "{err}");
    }
}
