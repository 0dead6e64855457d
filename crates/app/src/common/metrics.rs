//! Serving metrics to scrapers (`--metrics-listen`) and writing them for node_exporter's
//! textfile collector (`--metrics-file`).
//!
//! The endpoint is polled by the loop that already reads the tracer: a scrape gets the
//! aggregates as they are at that moment, and nothing is added to the traced calls.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::render::metrics::Format;

use crate::common::error::{Error, Result};

/// How long a scraper has to send its request once connected: the request is answered in the
/// loop that also reads the aggregates (and sees Ctrl-C), so a client that connects and says
/// nothing holds that loop up this long at most. Scrapers send theirs at once.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);
/// The most of a request read: a scrape's request line and headers fit with room to spare.
const MAX_REQUEST: usize = 16 * 1024;

/// Makes the exposition in the format asked for, or says why it cannot.
pub type Render<'a> = dyn FnMut(Format) -> std::result::Result<String, String> + 'a;

/// How often `--metrics-file` is rewritten.
pub const FILE_EVERY: Duration = Duration::from_secs(10);

/// `--metrics-listen` and `--metrics-file` together, driven from the loop that reads the
/// aggregates.
pub struct Exporter {
    endpoint: Option<MetricsEndpoint>,
    file: Option<PathBuf>,
    next_file: Instant,
}

impl Exporter {
    /// Binds the endpoint, so that a taken port fails before anything is attached or started.
    /// The file is not made yet (the command line checked where it goes): the first tick
    /// writes it, so a run that fails before it leaves no empty file behind.
    pub fn bind(listen: Option<SocketAddr>, file: Option<&Path>) -> Result<Exporter> {
        let endpoint = listen.map(MetricsEndpoint::bind).transpose()?;
        Ok(Exporter {
            endpoint,
            file: file.map(Path::to_path_buf),
            next_file: Instant::now(),
        })
    }

    /// Whether there is anything to export (an endpoint or a file).
    pub fn is_active(&self) -> bool {
        self.endpoint.is_some() || self.file.is_some()
    }

    /// Where the endpoint listens, if there is one.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.endpoint.as_ref().map(MetricsEndpoint::addr)
    }

    /// Answers waiting scrapes, and rewrites the file when it is due.
    pub fn tick(&mut self, render: &mut Render<'_>) -> Result<()> {
        if let Some(e) = &mut self.endpoint {
            e.serve_waiting(render);
        }
        if Instant::now() >= self.next_file {
            self.write_file(render)?;
        }
        Ok(())
    }

    /// Writes the file now (at the end: the final figures).
    pub fn write_file(&mut self, render: &mut Render<'_>) -> Result<()> {
        if let Some(path) = &self.file {
            let text = render(Format::Prometheus)
                .map_err(|why| Error::msg(format!("--metrics-file {}: {why}", path.display())))?;
            write_textfile(path, &text)?;
        }
        self.next_file = Instant::now() + FILE_EVERY;
        Ok(())
    }
}

/// A listening metrics endpoint: `GET /metrics`.
pub struct MetricsEndpoint {
    listener: TcpListener,
    addr: SocketAddr,
    scrapes: u64,
}

impl MetricsEndpoint {
    /// Listens on `addr` (`--metrics-listen`). An address in use or not this machine's is
    /// one line saying so.
    pub fn bind(addr: SocketAddr) -> Result<MetricsEndpoint> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            let why = match e.kind() {
                ErrorKind::AddrInUse => "the port is taken: pick a free one".to_string(),
                ErrorKind::AddrNotAvailable => {
                    "no interface here has that address: use one of this machine's, e.g. 127.0.0.1"
                        .to_string()
                }
                ErrorKind::PermissionDenied => {
                    "not permitted (ports below 1024 need root): pick another port".to_string()
                }
                _ => e.to_string(),
            };
            Error::msg(format!("--metrics-listen {addr}: {why}"))
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::msg(format!("--metrics-listen {addr}: {e}")))?;
        let addr = listener.local_addr().unwrap_or(addr);
        Ok(MetricsEndpoint {
            listener,
            addr,
            scrapes: 0,
        })
    }

    /// Where it listens (with the port the system chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Scrapes answered so far.
    pub fn scrapes(&self) -> u64 {
        self.scrapes
    }

    /// Answers every connection waiting now; `render` makes the exposition in the format asked
    /// for, once per scrape. Never blocks on a connection longer than [`REQUEST_TIMEOUT`].
    pub fn serve_waiting(&mut self, render: &mut Render<'_>) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if answer(stream, render) {
                        self.scrapes += 1;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // WouldBlock: nobody else waiting. Any other error concerns that one client.
                Err(_) => return,
            }
        }
    }
}

/// Reads one request from `stream` and answers it; true for a scrape of `/metrics`.
fn answer(mut stream: TcpStream, render: &mut Render<'_>) -> bool {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
    let Some(head) = read_head(&mut stream) else {
        return false;
    };
    let (status, content_type, body, scraped) = match parse_request(&head) {
        Some(("GET", "/metrics", accept)) => {
            let format = Format::from_accept(accept.as_deref());
            match render(format) {
                Ok(text) => ("200 OK", format.content_type(), text, true),
                Err(why) => (
                    "500 Internal Server Error",
                    "text/plain; charset=utf-8",
                    why + "\n",
                    false,
                ),
            }
        }
        Some(("GET", _, _)) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "tlsscope serves its metrics at /metrics\n".to_string(),
            false,
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "GET /metrics\n".to_string(),
            false,
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
    scraped
}

/// The request line and headers, up to the blank line; None if the client sent none in time.
fn read_head(stream: &mut TcpStream) -> Option<String> {
    let started = Instant::now();
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_REQUEST || started.elapsed() > REQUEST_TIMEOUT {
            return None;
        }
        match stream.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Method, path (without a query) and `Accept` header of a request head.
fn parse_request(head: &str) -> Option<(&str, &str, Option<String>)> {
    let mut lines = head.split("\r\n");
    let mut words = lines.next()?.split(' ');
    let method = words.next()?;
    let target = words.next()?;
    let path = target.split('?').next().unwrap_or(target);
    let accept = lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("accept")
            .then(|| value.trim().to_string())
    });
    Some((method, path, accept))
}

/// Writes the exposition for node_exporter's textfile collector: to a temporary file in the
/// same directory, then renamed over `path`, so the collector never reads half a file (its
/// documented way). Mode 0644: the collector may run as another user.
pub fn write_textfile(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp: PathBuf = {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".{}.tmp", std::process::id()));
        path.with_file_name(name)
    };
    let failed = |e: std::io::Error| {
        Error::msg(format!(
            "--metrics-file {}: {e}: give a writable file (its directory must exist)",
            path.display()
        ))
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(failed)?;
    f.write_all(text.as_bytes()).map_err(failed)?;
    f.sync_all().map_err(failed)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        failed(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn a_scrape_gets_the_format_its_accept_header_asks_for() {
        let mut e = MetricsEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = e.addr();
        let client = std::thread::spawn(move || {
            [
                get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n"),
                get(addr, "GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"),
                get(addr, "GET / HTTP/1.1\r\n\r\n"),
            ]
        });
        let mut render = |f: Format| Ok(format!("{f:?}\n"));
        while !client.is_finished() {
            e.serve_waiting(&mut render);
            std::thread::sleep(Duration::from_millis(5));
        }
        let [open, plain, root] = client.join().unwrap();
        assert!(open.starts_with("HTTP/1.1 200 OK\r\n"), "{open}");
        assert!(open.contains("Content-Type: application/openmetrics-text; version=1.0.0"));
        assert!(open.ends_with("\r\n\r\nOpenMetrics\n"), "{open}");
        assert!(
            plain.contains("Content-Type: text/plain; version=0.0.4"),
            "{plain}"
        );
        assert!(plain.ends_with("Prometheus\n"), "{plain}");
        assert!(root.starts_with("HTTP/1.1 404"), "{root}");
        assert_eq!(e.scrapes(), 2);
    }

    #[test]
    fn a_taken_port_is_one_line_naming_the_option() {
        let first = MetricsEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let err = MetricsEndpoint::bind(first.addr())
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            format!(
                "--metrics-listen {}: the port is taken: pick a free one",
                first.addr()
            )
        );
        let err = MetricsEndpoint::bind("192.0.2.1:9464".parse().unwrap())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("no interface here has that address"), "{err}");
    }

    #[test]
    fn the_textfile_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tlsscope.prom");
        write_textfile(&path, "a 1\n").unwrap();
        write_textfile(&path, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 2\n");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );
        let err = write_textfile(&dir.path().join("no/such/dir.prom"), "")
            .err()
            .unwrap()
            .to_string();
        assert!(err.starts_with("--metrics-file "), "{err}");
    }
}
