//! The experiments' error: one line saying what was being done and why, each cause said once.
//! Experiments fail for many reasons from many crates (TLS, the load engine, probes, processes,
//! files); what a user needs is the chain of what was being done, so that is what is kept.

use std::fmt::Display;

/// What went wrong, with the context it happened in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

/// The experiments' result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with this message.
    pub fn msg(message: impl Display) -> Error {
        Error(message.to_string())
    }

    /// This error inside `context`: "context: error" (the error's text said once).
    pub fn within(self, context: impl Display) -> Error {
        let context = context.to_string();
        if context.contains(&self.0) {
            Error(context)
        } else {
            Error(format!("{context}: {}", self.0))
        }
    }
}

/// Fails the enclosing function with a formatted [`Error`].
#[macro_export]
macro_rules! fail {
    ($($arg:tt)*) => {
        return Err($crate::common::error::Error::msg(format!($($arg)*)))
    };
}

/// Context for a fallible step, like anyhow's, for results and options.
pub trait Context<T> {
    fn context(self, context: impl Display) -> Result<T>;
    fn with_context<C: Display>(self, context: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, context: impl Display) -> Result<T> {
        self.map_err(|e| e.into().within(context))
    }

    fn with_context<C: Display>(self, context: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.into().within(context()))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, context: impl Display) -> Result<T> {
        self.ok_or_else(|| Error::msg(context))
    }

    fn with_context<C: Display>(self, context: impl FnOnce() -> C) -> Result<T> {
        self.ok_or_else(|| Error::msg(context()))
    }
}

/// The library errors experiments meet, taken as their one-line text (sources included).
macro_rules! from_errors {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error(one_line(&e))
            }
        })*
    };
}

from_errors!(
    std::io::Error,
    ossl::Error,
    ossl::TlsError,
    serde_json::Error,
    crate::common::target::TargetError,
);

impl From<load::Error> for Error {
    fn from(e: load::Error) -> Error {
        Error(crate::common::wording::load_error(&e))
    }
}

impl From<probes::Error> for Error {
    fn from(e: probes::Error) -> Error {
        Error(crate::common::wording::probes_error(&e))
    }
}

impl From<load::rustls_client::ClientError> for Error {
    fn from(e: load::rustls_client::ClientError) -> Error {
        Error(crate::common::wording::rustls_client(&e))
    }
}

impl From<String> for Error {
    fn from(message: String) -> Error {
        Error(message)
    }
}

/// An error and its sources on one line, each text once.
pub fn one_line(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_is_added_once() {
        let e: Result<()> = Err(Error::msg("refused"));
        let e = e.context("connecting").unwrap_err();
        assert_eq!(e.to_string(), "connecting: refused");
        assert_eq!(
            e.within("connecting: refused").to_string(),
            "connecting: refused"
        );
        let io = std::io::Error::from_raw_os_error(2);
        let e: Error = io.into();
        assert_eq!(e.to_string().matches("os error 2").count(), 1);
    }
}
