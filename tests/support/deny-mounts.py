#!/usr/bin/env python3
"""Runs a command where mount(2), unshare(2) and the new mount API fail with EPERM, as in a
locked-down container (Docker's default seccomp profile denies them), even to root.
Usage: deny-mounts.py COMMAND [ARGS...]"""
import ctypes
import os
import struct
import sys

AUDIT_ARCH_X86_64 = 0xC000003E
# x86_64 syscall numbers: mount, unshare, open_tree, move_mount, fsopen, fsconfig, fsmount.
DENIED = [165, 272, 428, 429, 430, 431, 432]
LD_ABS_W, JEQ_K, RET_K = 0x20, 0x15, 0x06
ALLOW, ERRNO_EPERM = 0x7FFF0000, 0x00050000 | 1

program = [(LD_ABS_W, 0, 0, 4)]  # the architecture
program.append((JEQ_K, 0, len(DENIED) + 3, AUDIT_ARCH_X86_64))  # other: allow
program.append((LD_ABS_W, 0, 0, 0))  # the syscall number
for i, nr in enumerate(DENIED):
    program.append((JEQ_K, len(DENIED) - i, 0, nr))  # to the EPERM return
program.append((RET_K, 0, 0, ALLOW))
program.append((RET_K, 0, 0, ERRNO_EPERM))
program.append((RET_K, 0, 0, ALLOW))
code = b"".join(struct.pack("HBBI", *ins) for ins in program)


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


buf = ctypes.create_string_buffer(code)
fprog = SockFprog(len(program), ctypes.addressof(buf))
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
    sys.exit(f"deny-mounts: PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}")
if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
    sys.exit(f"deny-mounts: seccomp: {os.strerror(ctypes.get_errno())}")
os.execvp(sys.argv[1], sys.argv[1:])
