//! How a command is asked to stop, and the exit status that says so.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context as _;

/// The exit status of a command ended by Ctrl-C (SIGINT), as shells report it (128 + 2).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Flags set by the signal handlers: `stop` on SIGINT or SIGTERM, `interrupted` on SIGINT only.
pub struct StopFlags {
    pub stop: Arc<AtomicBool>,
    pub interrupted: Arc<AtomicBool>,
}

impl StopFlags {
    /// Installs the handlers. A second Ctrl-C is not special: the command is already stopping.
    pub fn install() -> anyhow::Result<StopFlags> {
        StopFlags::with_stop(Arc::new(AtomicBool::new(false)))
    }

    /// Like `install`, setting an existing flag (e.g. a server's shutdown flag) on SIGINT or
    /// SIGTERM.
    pub fn with_stop(stop: Arc<AtomicBool>) -> anyhow::Result<StopFlags> {
        let flags = StopFlags {
            stop,
            interrupted: Arc::new(AtomicBool::new(false)),
        };
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, flags.stop.clone())
                .context("installing signal handlers")?;
        }
        signal_hook::flag::register(signal_hook::consts::SIGINT, flags.interrupted.clone())
            .context("installing signal handlers")?;
        Ok(flags)
    }

    /// 130 after Ctrl-C, else `otherwise`.
    pub fn exit_code(&self, otherwise: ExitCode) -> ExitCode {
        if self.interrupted.load(Ordering::Relaxed) {
            ExitCode::from(EXIT_INTERRUPTED)
        } else {
            otherwise
        }
    }
}
