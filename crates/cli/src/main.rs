//! The `tlsscope` binary: everything is in the library (`src/lib.rs`).

fn main() -> std::process::ExitCode {
    tlsscope::main_with(std::env::args_os())
}
