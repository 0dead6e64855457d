//! tlsscope's commands. Each command is a folder: `config.rs` (its options as the command line
//! defines them, and the typed settings made from them: the only code that knows flag names),
//! a session that runs and returns a typed result, and its renderers (`render.rs` for text,
//! `page.rs` for HTML). `common` and `render` hold what several commands share. The `cli` crate
//! parses the command line and calls a command's `run`.

pub mod common;
pub mod render;

pub mod bench;
pub mod compare;
pub mod handshake;
pub mod lab;
pub mod merge;
pub mod openssl;
pub mod profile;
pub mod serve;
pub mod sniff;
pub mod trace;
