//! Working inside a running process from outside, with ptrace: stop its threads, call a
//! function in it on one of them, read and write its memory, and let it go exactly as it was
//! (registers, an interrupted system call restarted, signals that arrived meanwhile delivered).
//! x86-64 only.
//!
//! tlsscope never stays attached: a [`Stopped`] process is held only for the few milliseconds
//! it takes to load the probe library or to swap GOT entries, and dropping it detaches.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// How long a function called in the process may take (the loader reading a library).
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// How long to wait for a thread to pause in a system call where calling in is safe.
const QUIET_TIMEOUT: Duration = Duration::from_secs(3);

/// `PTRACE_EVENT_STOP` (`<linux/ptrace.h>`): the stop `PTRACE_INTERRUPT` asks for.
const PTRACE_EVENT_STOP: i32 = 128;

/// The registers of a thread.
pub type Regs = libc::user_regs_struct;

/// Why working inside the process failed, in words for the one-line error.
pub type Failure = String;

/// A process whose threads tlsscope has seized; each is stopped on demand. Dropping it lets
/// every thread go, with the signals that arrived while it was held.
pub struct Stopped {
    pid: i32,
    mem: File,
    threads: Vec<Thread>,
}

struct Thread {
    tid: i32,
    stopped: bool,
    /// Signals that arrived while the thread was held, delivered when it is let go.
    pending: Vec<i32>,
}

/// System calls a thread waits in between requests: one stopped there holds no lock of the C
/// library or of the loader, so the loader can run on it.
const QUIET_SYSCALLS: &[u64] = &[
    0,   // read
    1,   // write
    7,   // poll
    23,  // select
    34,  // pause
    35,  // nanosleep
    43,  // accept
    44,  // sendto
    45,  // recvfrom
    46,  // sendmsg
    47,  // recvmsg
    61,  // wait4
    128, // rt_sigtimedwait
    130, // rt_sigsuspend
    230, // clock_nanosleep
    232, // epoll_wait
    247, // waitid
    270, // pselect6
    271, // ppoll
    281, // epoll_pwait
    288, // accept4
    426, // io_uring_enter
    441, // epoll_pwait2
];

impl Stopped {
    /// Seizes every thread of process `pid` (running on until stopped).
    pub fn seize(pid: u32) -> Result<Stopped, Failure> {
        let pid = i32::try_from(pid).map_err(|_| format!("{pid} is not a process ID"))?;
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| format!("cannot open its memory: {e}"))?;
        let mut p = Stopped {
            pid,
            mem,
            threads: Vec::new(),
        };
        // Threads started while seizing are seized on the next pass.
        for _ in 0..16 {
            let mut new = 0;
            for tid in tasks(pid)? {
                if p.threads.iter().any(|t| t.tid == tid) {
                    continue;
                }
                // SAFETY: PTRACE_SEIZE takes no pointers (options 0: no event stops).
                let rc = unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) };
                if rc != 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() == Some(libc::ESRCH) {
                        continue; // the thread ended meanwhile
                    }
                    return Err(format!("ptrace refused: {e}"));
                }
                p.threads.push(Thread {
                    tid,
                    stopped: false,
                    pending: Vec::new(),
                });
                new += 1;
            }
            if new == 0 {
                return Ok(p);
            }
        }
        Err("its threads kept multiplying while being seized".into())
    }

    fn thread(&mut self, tid: i32) -> &mut Thread {
        self.threads
            .iter_mut()
            .find(|t| t.tid == tid)
            .expect("a seized thread")
    }

    /// Stops thread `tid` (a no-op when it is stopped).
    pub fn stop(&mut self, tid: i32) -> Result<(), Failure> {
        if self.thread(tid).stopped {
            return Ok(());
        }
        // SAFETY: PTRACE_INTERRUPT on a thread we seized; no pointers.
        if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) } != 0 {
            return Err(format!(
                "cannot stop thread {tid}: {}",
                std::io::Error::last_os_error()
            ));
        }
        self.wait_stop(tid, Duration::from_secs(5))?;
        self.thread(tid).stopped = true;
        Ok(())
    }

    /// Stops every thread.
    pub fn stop_all(&mut self) -> Result<(), Failure> {
        let tids: Vec<i32> = self.threads.iter().map(|t| t.tid).collect();
        for tid in tids {
            self.stop(tid)?;
        }
        Ok(())
    }

    /// Lets a stopped thread run again.
    fn resume(&mut self, tid: i32) -> Result<(), Failure> {
        // SAFETY: PTRACE_CONT on a stopped thread we seized, no signal.
        if unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0, 0) } != 0 {
            return Err(format!(
                "cannot resume thread {tid}: {}",
                std::io::Error::last_os_error()
            ));
        }
        self.thread(tid).stopped = false;
        Ok(())
    }

    /// Waits until `tid` is in an interrupt stop. A signal that arrives first is held (and
    /// delivered when the thread is let go); a thread that ends is an error.
    fn wait_stop(&mut self, tid: i32, timeout: Duration) -> Result<(), Failure> {
        loop {
            match self.wait(tid, timeout)? {
                Stop::Interrupt => return Ok(()),
                Stop::Signal(sig) => {
                    self.thread(tid).pending.push(sig);
                    // SAFETY: PTRACE_CONT on the thread in its signal stop, the signal held.
                    unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0, 0) };
                }
            }
        }
    }

    /// The next stop of `tid`, waiting at most `timeout`.
    fn wait(&self, tid: i32, timeout: Duration) -> Result<Stop, Failure> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status it is given.
            let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
            if r < 0 {
                return Err(format!(
                    "lost thread {tid}: {}",
                    std::io::Error::last_os_error()
                ));
            }
            if r == tid {
                if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                    return Err(format!("thread {tid} ended"));
                }
                if libc::WIFSTOPPED(status) {
                    let sig = libc::WSTOPSIG(status);
                    return Ok(if status >> 16 == PTRACE_EVENT_STOP {
                        Stop::Interrupt
                    } else {
                        Stop::Signal(sig)
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "thread {tid} did not stop within {} s",
                    timeout.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    pub fn regs(&self, tid: i32) -> Result<Regs, Failure> {
        // SAFETY: user_regs_struct is plain integers; PTRACE_GETREGS fills it for a stopped
        // thread we seized.
        let mut regs: Regs = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0, &mut regs as *mut Regs) };
        if rc != 0 {
            return Err(format!(
                "cannot read thread {tid}'s registers: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(regs)
    }

    fn set_regs(&self, tid: i32, regs: &Regs) -> Result<(), Failure> {
        // SAFETY: PTRACE_SETREGS reads the struct it is given, for a stopped thread we seized.
        let rc = unsafe { libc::ptrace(libc::PTRACE_SETREGS, tid, 0, regs as *const Regs) };
        if rc != 0 {
            return Err(format!(
                "cannot set thread {tid}'s registers: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes of the process's memory at `addr`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Failure> {
        self.mem
            .read_exact_at(buf, addr)
            .map_err(|e| format!("cannot read its memory at {addr:#x}: {e}"))
    }

    pub fn read_u64(&self, addr: u64) -> Result<u64, Failure> {
        let mut b = [0; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Writes `bytes` at `addr`, read-only pages included (as a debugger does). Every thread
    /// that could read them must be stopped for the write to be seen whole.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), Failure> {
        self.mem
            .write_all_at(bytes, addr)
            .map_err(|e| format!("cannot write its memory at {addr:#x}: {e}"))
    }

    pub fn write_u64(&self, addr: u64, value: u64) -> Result<(), Failure> {
        self.write(addr, &value.to_ne_bytes())
    }

    /// Stops a thread that is waiting in a system call where the C library holds no lock (see
    /// `QUIET_SYSCALLS`), the main thread first; the others stay running. Returns its ID.
    pub fn quiet_thread(&mut self) -> Result<i32, Failure> {
        let deadline = Instant::now() + QUIET_TIMEOUT;
        let tids: Vec<i32> = self.threads.iter().map(|t| t.tid).collect();
        loop {
            for &tid in &tids {
                self.stop(tid)?;
                let regs = self.regs(tid)?;
                if QUIET_SYSCALLS.contains(&regs.orig_rax) {
                    return Ok(tid);
                }
                self.resume(tid)?;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "none of its threads paused in a system call within {} s (busy in its own code, where loading a library could deadlock); try again when it is less busy",
                    QUIET_TIMEOUT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Calls `function(args...)` on stopped thread `tid`, with `data` copied below its stack
    /// (its address is `data_arg`'s value where an argument is `DATA`), and returns the result
    /// register. The thread's registers are put back afterwards, so an interrupted system call
    /// restarts when it is let go.
    pub fn call(
        &mut self,
        tid: i32,
        function: u64,
        args: &[u64],
        data: &[u8],
    ) -> Result<u64, Failure> {
        let saved = self.regs(tid)?;
        let mut regs = saved;
        // Below the red zone (128 bytes) with room to spare, 16-byte aligned.
        let data_at = (saved.rsp - 512 - data.len() as u64) & !15;
        self.write(data_at, data)?;
        let rsp = data_at - 64 - 8; // a return address at rsp, rsp + 8 aligned to 16
        self.write_u64(rsp, 0)?; // returning to 0 faults: that is how the call is seen to end
        let args: Vec<u64> = args
            .iter()
            .map(|&a| if a == DATA { data_at } else { a })
            .collect();
        let slots = [
            &mut regs.rdi,
            &mut regs.rsi,
            &mut regs.rdx,
            &mut regs.rcx,
            &mut regs.r8,
            &mut regs.r9,
        ];
        for (slot, value) in slots.into_iter().zip(args) {
            *slot = value;
        }
        regs.rip = function;
        regs.rsp = rsp;
        regs.rax = 0;
        // Not in a system call: nothing is restarted when the thread runs the function.
        regs.orig_rax = u64::MAX;
        regs.eflags &= !0x400; // the direction flag clear, as the ABI requires at a call
        self.set_regs(tid, &regs)?;
        self.resume(tid)?;
        let result = self.run_until_return(tid);
        // The thread is stopped again (unless it ended): its own registers back.
        if self.thread(tid).stopped {
            self.set_regs(tid, &saved)?;
        }
        result
    }

    /// Runs `tid` until the called function returns to address 0; returns its result.
    fn run_until_return(&mut self, tid: i32) -> Result<u64, Failure> {
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.wait(tid, left) {
                Ok(Stop::Signal(libc::SIGSEGV)) => {
                    self.thread(tid).stopped = true;
                    let regs = self.regs(tid)?;
                    if regs.rip == 0 {
                        return Ok(regs.rax);
                    }
                    return Err(format!(
                        "the call faulted at {:#x} in thread {tid}",
                        regs.rip
                    ));
                }
                Ok(Stop::Signal(sig)) => {
                    self.thread(tid).pending.push(sig);
                    // SAFETY: PTRACE_CONT on the thread in its signal stop, the signal held.
                    unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0, 0) };
                }
                Ok(Stop::Interrupt) => {
                    // SAFETY: as above; a group stop is not ours to keep.
                    unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0, 0) };
                }
                Err(e) => {
                    // Still running our call: stop it where it is and put its registers
                    // back (what it was doing in the loader is abandoned).
                    let _ = self.stop(tid);
                    return Err(e);
                }
            }
        }
    }
}

/// Marks the argument that gets the address of the call's data.
pub const DATA: u64 = u64::MAX;

enum Stop {
    Interrupt,
    Signal(i32),
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for i in 0..self.threads.len() {
            let tid = self.threads[i].tid;
            // A thread must be stopped to be detached.
            if !self.threads[i].stopped && self.stop(tid).is_err() {
                continue; // ended
            }
            for &sig in &self.threads[i].pending {
                // SAFETY: tgkill queues a signal for the thread; it is delivered once the
                // thread runs untraced.
                unsafe { libc::syscall(libc::SYS_tgkill, self.pid, tid, sig) };
            }
            // SAFETY: PTRACE_DETACH on a stopped thread we seized; no signal injected.
            unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0) };
        }
    }
}

/// The thread IDs of process `pid`.
fn tasks(pid: i32) -> Result<Vec<i32>, Failure> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| format!("cannot list its threads: {e}"))?;
    Ok(dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}
