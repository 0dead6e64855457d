//! `experiments`: what tlsscope runs that is neither a library binding nor rendering: the
//! targets a user names, the servers under test, the blocking client, the lab's experiments and
//! the compare matrix.

pub mod bench;
pub mod client;
pub mod compare;
pub mod environment;
pub mod error;
pub mod lab;
pub mod metrics;
pub mod servers;
pub mod sniff;
pub mod sockets;
pub mod target;
pub mod trace;
pub mod wording;

pub use error::{Context, Error, Result};
pub use target::{Endpoint, TargetError};
