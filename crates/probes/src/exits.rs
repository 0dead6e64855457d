//! Where a function ends, read from its machine code: for functions probed without a return
//! probe (Go's). Target side: plain decoding, no kernel.

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

/// Where a function without a return probe ends (Go's: a uretprobe rewrites the return address
/// on the stack, and a goroutine's stack moves while it runs): each return instruction, to
/// probe instead, and each jump out of the function (a tail call), where the call ends without
/// a return of its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exits {
    /// Virtual addresses of the `ret` instructions.
    pub returns: Vec<u64>,
    /// Virtual addresses of jumps whose target lies outside the function.
    pub tail_jumps: Vec<u64>,
    /// Bytes that did not decode (data, or a decoding this reader cannot follow), if any: the
    /// exits found before them may not be all.
    pub undecoded_at: Option<u64>,
}

/// The exits of the function at virtual `address`, `size` bytes long, read from `bytes` (its
/// code: `size` bytes from `address`). Decoded linearly: Go's compiler puts no data in text,
/// and pads between functions with `int3`, which ends nothing.
pub fn exits(bytes: &[u8], address: u64) -> Exits {
    let end = address.saturating_add(bytes.len() as u64);
    let mut out = Exits::default();
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    while decoder.can_decode() {
        let at = decoder.ip();
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            out.undecoded_at = Some(at);
            break;
        }
        match instruction.mnemonic() {
            Mnemonic::Ret => out.returns.push(at),
            Mnemonic::Jmp => {
                let outside = match instruction.op0_kind() {
                    OpKind::NearBranch64 => {
                        let target = instruction.near_branch_target();
                        target < address || target >= end
                    }
                    // An indirect jump through a table indexed by a register (a switch's jump
                    // table) stays inside; any other indirect jump (a function value) is
                    // counted as leaving.
                    OpKind::Memory => instruction.memory_index() == Register::None,
                    OpKind::Register => true,
                    _ => false,
                };
                if outside {
                    out.tail_jumps.push(at);
                }
            }
            _ => {}
        }
    }
    out
}

/// Where the stack check of a Go function's prologue branches: `cmp rsp|r12, [r14+16]` (after a
/// `lea r12, [rsp-frame]` for a large frame) then `jbe` to the code that grows the stack. The
/// branch is what the entry probe can sit on: the kernel emulates a relative conditional jump,
/// where it single-steps the `cmp`, and nothing before it touches the arguments. Its distance
/// from the function's start, or None for another prologue.
pub fn stack_check_branch(bytes: &[u8], address: u64) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    for _ in 0..3 {
        if !decoder.can_decode() {
            return None;
        }
        let at = decoder.ip();
        decoder.decode_out(&mut instruction);
        match instruction.mnemonic() {
            Mnemonic::Cmp if instruction.memory_base() == Register::R14 => {}
            Mnemonic::Lea if instruction.op0_register() == Register::R12 => {}
            Mnemonic::Jbe | Mnemonic::Jb | Mnemonic::Jae | Mnemonic::Ja
                if instruction.op0_kind() == OpKind::NearBranch64 =>
            {
                let len = instruction.len();
                let start = usize::try_from(at - address).ok()?;
                let code = bytes.get(start..start + len)?;
                // The forms the kernel emulates: jcc rel8, or 0f 8x rel32 without a prefix.
                let emulated = matches!(code, [0x70..=0x7f, _] | [0x0f, 0x80..=0x8f, _, _, _, _]);
                return emulated.then_some(at - address);
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_return_of_a_function_is_an_exit_and_int3_padding_is_not() {
        // push %rbp; test %eax,%eax; je +2; pop %rbp; ret; xor %eax,%eax; pop %rbp; ret; int3 x2
        let code = [
            0x55, 0x85, 0xc0, 0x74, 0x02, 0x5d, 0xc3, 0x31, 0xc0, 0x5d, 0xc3, 0xcc, 0xcc,
        ];
        let e = exits(&code, 0x1000);
        assert_eq!(e.returns, vec![0x1006, 0x100a]);
        assert!(e.tail_jumps.is_empty() && e.undecoded_at.is_none());
    }

    #[test]
    fn a_jump_out_of_the_function_is_a_tail_call_and_one_inside_is_not() {
        // jmp +0 (inside: to the next instruction); jmp rel32 to 0x2000 (outside); ret
        let code = [0xeb, 0x00, 0xe9, 0xf9, 0x0f, 0x00, 0x00, 0xc3];
        let e = exits(&code, 0x1000);
        assert_eq!(e.tail_jumps, vec![0x1002]);
        assert_eq!(e.returns, vec![0x1007]);
    }

    #[test]
    fn a_go_stack_check_branch_is_found_after_its_compare() {
        // cmp rsp, [r14+0x10]; jbe +0x37a; push rbp  (crypto/tls.(*Conn).Read, go1.26)
        let small = [
            0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0x7a, 0x03, 0x00, 0x00, 0x55,
        ];
        assert_eq!(stack_check_branch(&small, 0x5ac420), Some(4));
        // lea r12, [rsp-0x48]; cmp r12, [r14+0x10]; jbe ...  ((*Conn).Write)
        let large = [
            0x4c, 0x8d, 0x64, 0x24, 0xb8, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0x93, 0x07, 0x00,
            0x00,
        ];
        assert_eq!(stack_check_branch(&large, 0x5aaf20), Some(9));
        // A function without the check (push rbp first) has none.
        assert_eq!(stack_check_branch(&[0x55, 0x48, 0x89, 0xe5], 0x1000), None);
    }

    #[test]
    fn bytes_that_do_not_decode_are_said() {
        let e = exits(&[0xc3, 0x0f, 0xff], 0x1000);
        assert_eq!(e.returns, vec![0x1000]);
        assert_eq!(e.undecoded_at, Some(0x1001));
    }
}
