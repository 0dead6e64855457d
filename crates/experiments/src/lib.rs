//! `experiments`: what tlsscope runs that is neither a library binding nor rendering: the
//! targets a user names, the servers under test, the blocking client, the lab's experiments and
//! the compare matrix.

pub mod target;

pub use target::{Endpoint, TargetError};
