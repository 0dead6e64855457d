//! Where a Go function's returns can be seen without a single-stepped probe: in the deferred
//! calls it makes on its way out. Target side: plain decoding, no kernel.
//!
//! A Go function with open-coded defers (`defer c.in.Unlock()` in `(*Conn).Read`) ends each
//! return after the lock the same way: it stores its results in its frame, calls each deferred
//! closure through a stack slot (`mov rdx, [rsp+S]; mov rax, [rdx]; call rax`), reloads the
//! results into registers, and returns (`add rsp, N; pop rbp; ret`). The `ret` is an
//! instruction the kernel single-steps; the closure's own stack-check branch is one it
//! emulates, and when it runs the results are already in the frame, at the offsets the reload
//! reads them from. This reads that shape from the code, and where every call of a closure is
//! such a deferred call on a return path, the closure's branch stands in for those returns.
//! Anything else (a slot used another way, two paths that reload from different places) leaves
//! the returns to their own probes.

use std::collections::{BTreeMap, BTreeSet};

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

/// The registers Go returns a function's first results in (ABIInternal): the `int` and the
/// error's two words of `(n int, err error)`, or an error's two words alone.
pub const RESULT_REGISTERS: [Register; 3] = [Register::RAX, Register::RBX, Register::RCX];

/// How many call sites of one closure a deferred exit can tell apart.
pub const MAX_SITES: usize = 16;

/// A closure of the function (`F.deferwrap1`, `F.func1`): where it starts, and the distance of
/// its emulated stack-check branch from there (see `exits::stack_check_branch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closure {
    pub address: u64,
    pub branch_delta: u64,
}

/// A closure whose stack-check branch marks the function's return on the paths that run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeferredExit {
    /// The closure's start (virtual address) and its branch's distance from there.
    pub closure: Closure,
    /// Where each result register's value is in the function's frame when the closure runs:
    /// an offset from the function's stack pointer, or None where the returns do not reload
    /// that register.
    pub results: [Option<u32>; 3],
    /// The return addresses of the function's deferred calls of this closure, less the
    /// address of the closure's branch: at the branch, the word at the stack pointer minus the
    /// instruction pointer is one of these when the function itself made the call.
    pub site_deltas: Vec<i64>,
}

/// A function's ends: the return instructions left to probe, and the deferred exits that stand
/// in for the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ends {
    /// Virtual addresses of the return instructions that still need their own probe.
    pub returns: Vec<u64>,
    pub deferred: Vec<DeferredExit>,
}

/// One return path's tail: the deferred calls before the reload, and the reload.
struct Tail {
    ret: u64,
    /// (slot, return address) of each deferred call, in the order they run.
    calls: Vec<(u32, u64)>,
    /// Each result register's frame offset, as the reload reads it.
    results: [Option<u32>; 3],
}

/// The function at `address` (its code `bytes`) and its closures: each return instruction in
/// `returns`, and the deferred exits that take over the returns they cover.
pub fn ends(bytes: &[u8], address: u64, returns: &[u64], closures: &[Closure]) -> Ends {
    let code = decode(bytes, address);
    let slots = closure_slots(&code, closures);
    let targets = branch_targets(&code);
    let tails: Vec<Tail> = returns
        .iter()
        .filter_map(|&ret| tail_of(&code, ret, &targets))
        .collect();
    let mut deferred = Vec::new();
    let mut covered = BTreeSet::new();
    for (&slot, &closure) in &slots {
        let reads = slot_reads(&code, slot);
        let calls: Vec<(&Tail, u64)> = tails
            .iter()
            .flat_map(|t| {
                t.calls
                    .iter()
                    .filter(move |(s, _)| *s == slot)
                    .map(move |&(_, site)| (t, site))
            })
            .collect();
        // Every read of the slot is one of these deferred calls, and all of them find the
        // results in the same place.
        let same = calls.windows(2).all(|w| w[0].0.results == w[1].0.results);
        if calls.is_empty() || reads != calls.len() || !same || calls.len() > MAX_SITES {
            continue;
        }
        let branch = closure.address.wrapping_add(closure.branch_delta);
        deferred.push(DeferredExit {
            closure,
            results: calls[0].0.results,
            site_deltas: calls
                .iter()
                .map(|&(_, site)| site.wrapping_sub(branch) as i64)
                .collect(),
        });
        covered.extend(calls.iter().map(|(t, _)| t.ret));
    }
    Ends {
        returns: returns
            .iter()
            .copied()
            .filter(|r| !covered.contains(r))
            .collect(),
        deferred,
    }
}

fn decode(bytes: &[u8], address: u64) -> Vec<Instruction> {
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let mut out = Vec::new();
    while decoder.can_decode() {
        let instruction = decoder.decode();
        if instruction.is_invalid() {
            break;
        }
        out.push(instruction);
    }
    out
}

/// Where the branches inside the code land.
fn branch_targets(code: &[Instruction]) -> BTreeSet<u64> {
    code.iter()
        .filter(|i| i.op0_kind() == OpKind::NearBranch64)
        .map(Instruction::near_branch_target)
        .collect()
}

/// `[rsp+disp]` with no index: its displacement.
fn stack_slot(i: &Instruction, operand: u32) -> Option<u32> {
    (i.op_kind(operand) == OpKind::Memory
        && i.memory_base() == Register::RSP
        && i.memory_index() == Register::None)
        .then(|| u32::try_from(i.memory_displacement64()).ok())
        .flatten()
}

/// `mov r64, [rsp+disp]`: the register and the displacement.
fn load_from_stack(i: &Instruction) -> Option<(Register, u32)> {
    (i.mnemonic() == Mnemonic::Mov && i.op0_kind() == OpKind::Register)
        .then(|| stack_slot(i, 1).map(|s| (i.op0_register(), s)))
        .flatten()
}

/// RAX to R15.
fn is_gpr64(r: Register) -> bool {
    (Register::RAX as u32..=Register::R15 as u32).contains(&(r as u32))
}

/// `mov [rsp+disp], r64`: the displacement and the register.
fn store_to_stack(i: &Instruction) -> Option<(u32, Register)> {
    (i.mnemonic() == Mnemonic::Mov
        && i.op1_kind() == OpKind::Register
        && is_gpr64(i.op1_register()))
    .then(|| stack_slot(i, 0).map(|s| (s, i.op1_register())))
    .flatten()
}

/// The first store of `register` to the stack within a few instructions after `from`.
fn next_store_of(code: &[Instruction], from: usize, register: Register) -> Option<u32> {
    code.iter()
        .skip(from + 1)
        .take(8)
        .find_map(|i| store_to_stack(i).filter(|&(_, r)| r == register))
        .map(|(slot, _)| slot)
}

/// Which stack slots hold a pointer to a closure of `closures`: the closure's code address
/// is stored at the start of a frame object (`lea r, [rip+closure]; mov [rsp+X], r`) whose
/// address goes to the slot (`lea r, [rsp+X]; mov [rsp+S], r`). A slot given two closures is
/// left out.
fn closure_slots(code: &[Instruction], closures: &[Closure]) -> BTreeMap<u32, Closure> {
    let mut objects: BTreeMap<u32, Closure> = BTreeMap::new();
    for (n, i) in code.iter().enumerate() {
        if i.mnemonic() != Mnemonic::Lea || !i.is_ip_rel_memory_operand() {
            continue;
        }
        let target = i.ip_rel_memory_address();
        if let Some(closure) = closures.iter().find(|c| c.address == target) {
            if let Some(object) = next_store_of(code, n, i.op0_register()) {
                objects.insert(object, *closure);
            }
        }
    }
    let mut slots: BTreeMap<u32, Option<Closure>> = BTreeMap::new();
    for (n, i) in code.iter().enumerate() {
        if i.mnemonic() != Mnemonic::Lea {
            continue;
        }
        let Some(closure) = stack_slot(i, 1).and_then(|x| objects.get(&x)) else {
            continue;
        };
        if let Some(slot) = next_store_of(code, n, i.op0_register()) {
            let entry = slots.entry(slot).or_insert(Some(*closure));
            if *entry != Some(*closure) {
                *entry = None;
            }
        }
    }
    slots
        .into_iter()
        .filter_map(|(slot, c)| c.map(|c| (slot, c)))
        .collect()
}

/// How many instructions use the slot other than by writing it (a store of the closure's
/// address, or of zero from a register: `movq [rsp+S], xmm15`): a deferred call's load among
/// them.
fn slot_reads(code: &[Instruction], slot: u32) -> usize {
    let writes = |i: &Instruction| {
        matches!(
            i.mnemonic(),
            Mnemonic::Mov | Mnemonic::Movq | Mnemonic::Movups
        ) && stack_slot(i, 0) == Some(slot)
            && i.op1_kind() == OpKind::Register
    };
    code.iter()
        .filter(|i| !writes(i))
        .filter(|i| (0..i.op_count()).any(|o| stack_slot(i, o) == Some(slot)))
        .count()
}

/// The tail of the return at `ret`: `add rsp, N; pop rbp; ret` after a reload of the result
/// registers from the frame, after one or more deferred calls through stack slots (with the
/// byte stores that keep the defer bits between them). None for another shape, or where a
/// branch lands inside the tail after its first deferred call begins (a path that skips it).
fn tail_of(code: &[Instruction], ret: u64, targets: &BTreeSet<u64>) -> Option<Tail> {
    let k = code.iter().position(|i| i.ip() == ret)?;
    let at = |n: usize| code.get(n);
    // The frame's release: `add rsp, N; pop rbp` (Go 1.21 on) or `mov rbp, [rsp+X]; add rsp,
    // N` (before).
    let mut n = k.checked_sub(1)?;
    let mut released = false;
    for _ in 0..2 {
        let i = at(n)?;
        let frame_pointer = (i.mnemonic() == Mnemonic::Pop && i.op0_register() == Register::RBP)
            || load_from_stack(i).is_some_and(|(r, _)| r == Register::RBP);
        let stack = i.mnemonic() == Mnemonic::Add && i.op0_register() == Register::RSP;
        if !frame_pointer && !stack {
            return None;
        }
        released |= stack;
        n = n.checked_sub(1)?;
    }
    if !released {
        return None;
    }
    let mut results = [None; 3];
    while let Some((register, offset)) = load_from_stack(at(n)?) {
        let r = RESULT_REGISTERS.iter().position(|&x| x == register)?;
        if results[r].is_some() {
            return None;
        }
        results[r] = Some(offset);
        n = n.checked_sub(1)?;
    }
    if results.iter().all(Option::is_none) {
        return None;
    }
    let mut calls = Vec::new();
    let mut first = None;
    loop {
        let i = at(n)?;
        if i.mnemonic() == Mnemonic::Mov
            && i.op1_kind() == OpKind::Immediate8
            && stack_slot(i, 0).is_some()
        {
            n = n.checked_sub(1)?;
            continue;
        }
        let Some(slot) = deferred_call(code, n) else {
            break;
        };
        calls.push((slot, i.next_ip()));
        first = Some(n - 2);
        n = n.checked_sub(3)?;
    }
    let first = code.get(first?)?.ip();
    if first >= ret || targets.range(first + 1..=ret).next().is_some() {
        return None;
    }
    calls.reverse();
    Some(Tail {
        ret,
        calls,
        results,
    })
}

/// `mov rdx, [rsp+S]; mov r, [rdx]; call r` ending at instruction `n`: the slot S.
fn deferred_call(code: &[Instruction], n: usize) -> Option<u32> {
    let call = code.get(n)?;
    let fetch = code.get(n.checked_sub(1)?)?;
    let (context, slot) = load_from_stack(code.get(n.checked_sub(2)?)?)?;
    let called = call.op0_register();
    let is_call = call.mnemonic() == Mnemonic::Call && call.op0_kind() == OpKind::Register;
    let is_fetch = fetch.mnemonic() == Mnemonic::Mov
        && fetch.op0_register() == called
        && fetch.op1_kind() == OpKind::Memory
        && fetch.memory_base() == Register::RDX
        && fetch.memory_index() == Register::None
        && fetch.memory_displacement64() == 0;
    (is_call && is_fetch && context == Register::RDX).then_some(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function shaped like `(*Conn).Read` (go1.26), cut down: it stores a closure of
    /// `deferwrap` at [rsp+0x40] and its address in slot 0x50; one return runs the deferred
    /// call, reloads AX, BX, CX from 0x20, 0x30, 0x38 and returns; an early return has no
    /// deferred call.
    fn read_like(deferwrap: u64) -> (Vec<u8>, u64) {
        let base = 0x1000u64;
        let mut code = Vec::new();
        // lea rdi, [rip+disp]  (48 8d 3d disp32): the closure's code address.
        let lea_end = base + 7;
        let disp = i32::try_from(deferwrap as i64 - lea_end as i64).unwrap();
        code.extend([0x48, 0x8d, 0x3d]);
        code.extend(disp.to_le_bytes());
        code.extend([0x48, 0x89, 0x7c, 0x24, 0x40]); // mov [rsp+0x40], rdi
        code.extend([0x48, 0x8d, 0x7c, 0x24, 0x40]); // lea rdi, [rsp+0x40]
        code.extend([0x48, 0x89, 0x7c, 0x24, 0x50]); // mov [rsp+0x50], rdi
        code.extend([0x85, 0xc0]); // test eax, eax
        code.extend([0x74, 0x28]); // je early (+0x28)
        code.extend([0xc6, 0x44, 0x24, 0x1f, 0x00]); // mov byte [rsp+0x1f], 0
        code.extend([0x48, 0x8b, 0x54, 0x24, 0x50]); // mov rdx, [rsp+0x50]
        code.extend([0x48, 0x8b, 0x02]); // mov rax, [rdx]
        code.extend([0xff, 0xd0]); // call rax
        code.extend([0x48, 0x8b, 0x44, 0x24, 0x20]); // mov rax, [rsp+0x20]
        code.extend([0x48, 0x8b, 0x5c, 0x24, 0x30]); // mov rbx, [rsp+0x30]
        code.extend([0x48, 0x8b, 0x4c, 0x24, 0x38]); // mov rcx, [rsp+0x38]
        code.extend([0x48, 0x83, 0xc4, 0x58]); // add rsp, 0x58
        code.extend([0x5d, 0xc3]); // pop rbp; ret
        code.extend([0x31, 0xc0, 0x48, 0x83, 0xc4, 0x58, 0x5d, 0xc3]); // early: xor; add; pop; ret
        (code, base)
    }

    /// The closure `read_like` defers: its stack-check branch 4 bytes in.
    const DEFERWRAP: Closure = Closure {
        address: 0x2000,
        branch_delta: 4,
    };

    fn returns_of(code: &[u8], base: u64) -> Vec<u64> {
        decode(code, base)
            .iter()
            .filter(|i| i.mnemonic() == Mnemonic::Ret)
            .map(Instruction::ip)
            .collect()
    }

    #[test]
    fn a_return_after_a_deferred_call_is_left_to_the_closures_branch() {
        let closure = DEFERWRAP;
        let (code, base) = read_like(closure.address);
        let returns = returns_of(&code, base);
        assert_eq!(returns.len(), 2);
        let e = ends(&code, base, &returns, &[closure]);
        // The early return keeps its probe; the other is the closure's.
        assert_eq!(e.returns, vec![returns[1]]);
        assert_eq!(e.deferred.len(), 1);
        let d = &e.deferred[0];
        assert_eq!(d.results, [Some(0x20), Some(0x30), Some(0x38)]);
        // The call's return address (after `call rax`) less the closure's branch.
        let call_end = decode(&code, base)
            .iter()
            .find(|i| i.mnemonic() == Mnemonic::Call)
            .unwrap()
            .next_ip();
        assert_eq!(d.site_deltas, vec![call_end as i64 - 0x2004]);
    }

    #[test]
    fn any_bytes_give_an_answer_not_a_panic() {
        let closure = DEFERWRAP;
        let (code, base) = read_like(closure.address);
        // Every cut of the function, and every byte flipped in turn.
        for end in 0..code.len() {
            let returns = returns_of(&code[..end], base);
            let _ = ends(&code[..end], base, &returns, &[closure]);
        }
        for at in 0..code.len() {
            let mut bent = code.clone();
            bent[at] ^= 0xff;
            let returns = returns_of(&bent, base);
            let e = ends(&bent, base, &returns, &[closure]);
            assert!(e.returns.iter().all(|r| returns.contains(r)));
        }
    }

    #[test]
    fn a_closure_that_is_not_the_functions_own_covers_nothing() {
        let (code, base) = read_like(0x2000);
        let returns = returns_of(&code, base);
        let other = Closure {
            address: 0x3000,
            branch_delta: 4,
        };
        let e = ends(&code, base, &returns, &[other]);
        assert_eq!(e.returns, returns);
        assert!(e.deferred.is_empty());
    }

    #[test]
    fn a_slot_read_outside_a_deferred_call_leaves_every_return_probed() {
        let closure = DEFERWRAP;
        let (mut code, base) = read_like(closure.address);
        // Another use of the slot: mov rsi, [rsp+0x50], after the last ret.
        code.extend([0x48, 0x8b, 0x74, 0x24, 0x50]);
        let returns = returns_of(&code, base);
        let e = ends(&code, base, &returns, &[closure]);
        assert_eq!(e.returns, returns);
        assert!(e.deferred.is_empty());
    }

    #[test]
    fn a_branch_into_the_tail_after_the_deferred_call_leaves_that_return_probed() {
        let closure = DEFERWRAP;
        let (mut code, base) = read_like(closure.address);
        // Point the `je` at the reload after `call rax` instead of the early return: a path
        // that returns without the deferred call.
        let je = code.iter().position(|&b| b == 0x74).unwrap();
        let call = code.windows(2).position(|w| w == [0xff, 0xd0]).unwrap();
        code[je + 1] = u8::try_from(call + 2 - (je + 2)).unwrap();
        let returns = returns_of(&code, base);
        let e = ends(&code, base, &returns, &[closure]);
        assert_eq!(e.returns, returns);
        assert!(e.deferred.is_empty());
    }
}
