//! Where a process's CPU goes: its stacks, sampled by Debian's `perf` (the cpu-clock software
//! event, as this VM has no hardware counters, and DWARF unwinding from each sample's copy of
//! the user stack, so frames in libraries built without frame pointers are right), then folded
//! so that the same function lines up whatever version of its library ran it.
//!
//! [`perf`] runs the sampler; [`stacks`] reads what it wrote and adds it up; [`tailcalls`]
//! puts back the frames tail calls hid.

pub mod perf;
pub mod stacks;
pub mod tailcalls;

pub use perf::{make_control_fifo, window, Connections, PerfError, Recording, Sampler};
pub use stacks::{Frame, FunctionCost, Profile, Stack};
pub use tailcalls::{Restorer, Site};
