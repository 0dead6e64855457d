//! The two backends behind one face: which one counts the calls ([`Backend`]), and the traits
//! `trace`, `sniff` and the lab read a running trace or capture through, implemented here for
//! the kernel's tracer and sniffer and the in-process tracer. The only module that knows both
//! backends.

use std::time::Duration;

use crate::capture::{CallSink, Polled, SniffCounters};
use crate::histogram::{Calibration, Snapshot};
use crate::inproc::UserTracer;
use crate::kernel::latency::Tracer;
use crate::kernel::sniff::{Assembler, Sniffer};
use crate::kernel::syscalls::SyscallHooks;
use crate::plan::{Attached, Missing};
use crate::Error;

/// Which backend counts the calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// eBPF uprobes in the kernel: any process, internal functions too; a trap per call.
    Kernel,
    /// tlsscope's library inside the traced program: the exported functions, tens of
    /// nanoseconds per call.
    User,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Kernel => "kernel",
            Backend::User => "user",
        }
    }
}

/// A running latency trace, whichever backend counts the calls: what `trace` and the lab read.
pub trait Trace {
    fn backend(&self) -> Backend;
    /// Everything counted so far (cumulative).
    fn snapshot(&self) -> Result<Snapshot, Error>;
    /// The last snapshot, taken when tracing ends.
    fn final_snapshot(&self) -> Result<Snapshot, Error> {
        self.snapshot()
    }
    fn attached(&self) -> &[Attached];
    fn not_attached(&self) -> &[Missing];
    /// The kernel hooks the trace relies on, if any.
    fn syscall_hooks(&self) -> Option<&SyscallHooks> {
        None
    }
    /// What one probed call costs, when measured.
    fn calibration(&self) -> Option<Calibration>;
    /// Probes the children the process targets forked since the start, where the backend
    /// must (the kernel's: a uprobe does not fire in a fork; the in-process library is
    /// inherited); returns (parent, child) per child newly followed.
    fn follow_children(&self) -> Vec<(u32, u32)> {
        Vec::new()
    }
}

impl Trace for Tracer {
    fn backend(&self) -> Backend {
        Backend::Kernel
    }
    fn snapshot(&self) -> Result<Snapshot, Error> {
        Tracer::snapshot(self)
    }
    fn final_snapshot(&self) -> Result<Snapshot, Error> {
        Tracer::final_snapshot(self)
    }
    fn attached(&self) -> &[Attached] {
        Tracer::attached(self)
    }
    fn not_attached(&self) -> &[Missing] {
        Tracer::not_attached(self)
    }
    fn syscall_hooks(&self) -> Option<&SyscallHooks> {
        Tracer::syscall_hooks(self)
    }
    fn calibration(&self) -> Option<Calibration> {
        Tracer::calibration(self)
    }
    fn follow_children(&self) -> Vec<(u32, u32)> {
        Tracer::follow_children(self)
    }
}

impl Trace for UserTracer {
    fn backend(&self) -> Backend {
        Backend::User
    }
    fn snapshot(&self) -> Result<Snapshot, Error> {
        UserTracer::snapshot(self)
    }
    fn attached(&self) -> &[Attached] {
        UserTracer::attached(self)
    }
    fn not_attached(&self) -> &[Missing] {
        UserTracer::not_attached(self)
    }
    fn calibration(&self) -> Option<Calibration> {
        UserTracer::calibration(self)
    }
}

/// A running capture, whichever backend copies the calls: what `sniff` reads.
pub trait Capture {
    /// Waits `interval`, then hands `sink` the calls completed since the last poll.
    fn poll(
        &self,
        interval: Duration,
        assembler: &mut Assembler,
        sink: &mut CallSink<'_>,
    ) -> Result<Polled, Error>;
    fn counters(&self) -> Result<SniffCounters, Error>;
    /// The functions sniffed.
    fn functions(&self) -> Vec<&'static str>;
    fn not_attached(&self) -> &[Missing];
    /// The kernel hooks the capture relies on, if any.
    fn syscall_hooks(&self) -> Option<&SyscallHooks>;
    fn backend(&self) -> Backend;
    /// Key log lines read since the last call (`SniffConfig::key_log`; Go programs only).
    fn take_key_lines(&self) -> Vec<String> {
        Vec::new()
    }
    /// The key log hooks attached, and those the kernel refused, with why.
    fn key_log_hooks(&self) -> (usize, Vec<String>) {
        (0, Vec::new())
    }
}

impl Capture for Sniffer {
    fn take_key_lines(&self) -> Vec<String> {
        Sniffer::take_key_lines(self)
    }
    fn key_log_hooks(&self) -> (usize, Vec<String>) {
        let (n, refused) = Sniffer::key_log_hooks(self);
        (n, refused.to_vec())
    }
    fn poll(
        &self,
        interval: Duration,
        assembler: &mut Assembler,
        sink: &mut CallSink<'_>,
    ) -> Result<Polled, Error> {
        let calls = Sniffer::poll(self, interval, assembler)?;
        for call in &calls {
            sink(call, &call.data);
        }
        Ok(Polled {
            calls: calls.len(),
            fullest: None,
        })
    }
    fn counters(&self) -> Result<SniffCounters, Error> {
        Sniffer::counters(self)
    }
    fn functions(&self) -> Vec<&'static str> {
        // Once each, however many processes it is probed in (a server's workers).
        let mut names: Vec<&'static str> = Vec::new();
        for p in Sniffer::attached(self) {
            if !names.contains(&p.function.name) {
                names.push(p.function.name);
            }
        }
        names
    }
    fn not_attached(&self) -> &[Missing] {
        Sniffer::not_attached(self)
    }
    fn syscall_hooks(&self) -> Option<&SyscallHooks> {
        Some(Sniffer::syscall_hooks(self))
    }
    fn backend(&self) -> Backend {
        Backend::Kernel
    }
}

impl Capture for UserTracer {
    fn poll(
        &self,
        interval: Duration,
        _: &mut Assembler,
        sink: &mut CallSink<'_>,
    ) -> Result<Polled, Error> {
        if !interval.is_zero() {
            std::thread::sleep(interval);
        }
        Ok(self.visit_calls(sink))
    }
    fn counters(&self) -> Result<SniffCounters, Error> {
        Ok(self.sniff_counters())
    }
    fn functions(&self) -> Vec<&'static str> {
        self.attached()
            .iter()
            .map(|a| a.point.function.name)
            .collect()
    }
    fn not_attached(&self) -> &[Missing] {
        UserTracer::not_attached(self)
    }
    fn syscall_hooks(&self) -> Option<&SyscallHooks> {
        None
    }
    fn backend(&self) -> Backend {
        Backend::User
    }
}
