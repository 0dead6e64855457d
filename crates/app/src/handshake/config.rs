//! `tlsscope handshake`'s options, as the command line defines them, and the typed settings made
//! from them once ([`HandshakeArgs::config`]): the only code that knows handshake's flag names.

use clap::Args;

use crate::common::args::*;
use crate::common::client_args::ClientTls;
use crate::common::output::OutputFile;
use crate::common::target::Endpoint;

#[derive(Debug, Args)]
pub struct HandshakeArgs {
    /// Server to connect to: HOST[:PORT], [IPv6]:PORT or https://HOST[:PORT]/PATH (the path
    /// becomes --request; port 443 when none is given).
    #[arg(default_value = "127.0.0.1:4433", value_name = "TARGET")]
    pub target: Endpoint,
    /// Connections to make, one after another.
    #[arg(long, short = 'n', default_value_t = 1, value_parser = at_least_1, allow_negative_numbers = true)]
    pub count: usize,
    /// Offer each connection's session to the next one, and fail unless they all resume.
    #[arg(long)]
    pub resume: bool,
    /// Send GET PATH on each connection and read the response.
    #[arg(long, value_name = "PATH")]
    pub request: Option<String>,
    #[command(flatten)]
    pub peer: PeerArgs,
    /// Write one JSON object per connection instead of text, to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Give up on a connection after this long: 10s, 500ms, 2m.
    #[arg(long, default_value = "10s", value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// A handshake run's settings, validated.
#[derive(Debug)]
pub struct HandshakeConfig {
    /// The OpenSSL whose client connects (`--openssl`, resolved).
    pub library: ossl::LibrarySource,
    pub target: Endpoint,
    /// Connections to make, one after another.
    pub count: usize,
    /// Offer each connection's session to the next.
    pub resume: bool,
    /// The path to GET: --request, else the target URL's path.
    pub request: Option<String>,
    pub tls: ClientTls,
    /// The name sent as SNI.
    pub sni: Option<String>,
    pub timeout: std::time::Duration,
    /// One JSON object per connection instead of text, here.
    pub json: Option<OutputFile>,
}

impl HandshakeArgs {
    /// The run's settings, checked before any connection is made.
    pub fn config(&self, library: &ossl::LibrarySource) -> anyhow::Result<HandshakeConfig> {
        let a = self;
        if let Some(path) = &a.request {
            if !path.starts_with('/') {
                crate::usage_bail!("--request {path}: the path must start with /");
            }
        }
        Ok(HandshakeConfig {
            library: library.clone(),
            target: a.target.clone(),
            count: a.count,
            resume: a.resume,
            request: a.request.clone().or_else(|| a.target.path.clone()),
            tls: ClientTls::from_args(&a.tls, &a.peer, true, None)?,
            sni: a.peer.server_name(&a.target),
            timeout: a.timeout,
            json: a.json.clone(),
        })
    }
}

/// The one line for connections that did not resume: `not_resumed` of the `count - 1` after
/// the first.
pub fn not_resumed(not_resumed: usize, count: usize) -> String {
    format!(
        "--resume: {not_resumed} of {} after the first did not resume \
         (is the server's session cache or ticket support off?)",
        crate::render::words::count(count as u64 - 1, "connection")
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `tlsscope handshake`'s options alone, parsed as the command line would.
    #[derive(Parser)]
    struct HandshakeOnly {
        #[command(flatten)]
        handshake: HandshakeArgs,
    }

    fn config(argv: &[&str]) -> anyhow::Result<HandshakeConfig> {
        let mut all = vec!["handshake"];
        all.extend_from_slice(argv);
        let a = HandshakeOnly::try_parse_from(all).unwrap().handshake;
        a.config(&ossl::LibrarySource::System)
    }

    #[test]
    fn the_request_is_checked_once_and_defaults_to_the_targets_path() {
        let why = config(&["--request", "index.html"]).unwrap_err();
        assert!(why.is::<crate::common::usage::UsageError>());
        assert_eq!(
            why.to_string(),
            "--request index.html: the path must start with /"
        );
        let c = config(&["https://127.0.0.1:4433/a", "--cafile", "/ca.pem"]).unwrap();
        assert_eq!(c.request.as_deref(), Some("/a"));
        assert_eq!(c.tls.verify(), Some(Some(std::path::Path::new("/ca.pem"))));
        assert!(c.tls.tickets);
        assert_eq!(
            not_resumed(2, 5),
            "--resume: 2 of 4 connections after the first did not resume \
             (is the server's session cache or ticket support off?)"
        );
    }
}
