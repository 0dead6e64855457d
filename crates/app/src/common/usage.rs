//! How a command's failure reaches the user: usage errors (exit status 2), one-line errors,
//! and the exit status that says the library under test lacks what was asked.

use std::process::ExitCode;

/// A command line that parses but asks for what cannot be done (options that exclude each
/// other, a value out of range): a usage error, exit status 2, as clap's own.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Returns early from a command with a [`UsageError`].
#[macro_export]
macro_rules! usage_bail {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::common::usage::UsageError(format!($($arg)*))))
    };
}

/// The error and its causes joined on one line, each said once: a cause whose text an outer
/// message already includes (an OS error quoted in its context) is not repeated.
pub fn one_line(e: &anyhow::Error) -> String {
    let top: &(dyn std::error::Error + 'static) = e.as_ref();
    crate::common::error::one_line(top)
}

/// Exit status 3 when the library under test lacks what was asked (a group, a key type, a
/// feature: compare's matrix reports such a variant as not run), 1 for any other failure.
pub fn failure_status(e: &anyhow::Error) -> ExitCode {
    let lacks = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<ossl::Error>(),
            Some(ossl::Error::NotInLibrary { .. })
        )
    });
    if lacks {
        ExitCode::from(crate::common::servers::EXIT_NOT_IN_LIBRARY)
    } else {
        ExitCode::FAILURE
    }
}
