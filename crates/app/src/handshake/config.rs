//! `tlsscope handshake`'s options, as the command line defines them.

use clap::Args;

use crate::common::args::*;
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
