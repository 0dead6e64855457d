//! The spellings issue 30 retired (one flag, one meaning), kept for one release: each is
//! rewritten to its new spelling before the command line is parsed, with a one-line notice on
//! stderr. One that would now be read as something else (`trace -c 16`, bench's connection
//! count) is refused.
//!
//! The new meanings: `--json FILE` takes a file everywhere (`-`: stdout); `-n`/`--count` is how
//! many operations in total; `-o` is an output file; `-c` is a connection count.

use std::ffi::{OsStr, OsString};

/// A command line in its new spelling, and a notice for each old spelling it had.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Respelled {
    pub argv: Vec<OsString>,
    pub notices: Vec<String>,
}

/// Rewrites the old spellings of `argv` (program name first). Stops at `--`: what follows is a
/// program's own command line. Err: a usage error, as one sentence.
pub fn respell(argv: Vec<OsString>) -> Result<Respelled, String> {
    let mut out = Respelled::default();
    let mut tokens = argv.into_iter();
    out.argv.extend(tokens.next());
    let mut command: Option<String> = None;
    let mut rest: Vec<OsString> = tokens.collect();
    rest.reverse();
    while let Some(token) = rest.pop() {
        if token == "--" {
            out.argv.push(token);
            out.argv.extend(rest.drain(..).rev());
            break;
        }
        // The global option's value is never a spelling to change.
        if token == "--openssl" {
            out.argv.push(token);
            out.argv.extend(rest.pop());
            continue;
        }
        let Some(text) = token.to_str() else {
            out.argv.push(token);
            continue;
        };
        let Some(cmd) = command.as_deref() else {
            if !text.starts_with('-') {
                command = Some(text.to_string());
            }
            out.argv.push(token);
            continue;
        };
        let next = rest.last().map(OsString::as_os_str);
        let mut notice = |n: String| {
            if !out.notices.contains(&n) {
                out.notices.push(n);
            }
        };
        match (cmd, text) {
            ("bench", "--requests") => {
                notice(notice_for("bench --requests N", "--count N (-n N)"));
                out.argv.push("--count".into());
            }
            ("bench", t) if t.starts_with("--requests=") => {
                notice(notice_for("bench --requests N", "--count N (-n N)"));
                out.argv
                    .push(t.replacen("--requests=", "--count=", 1).into());
            }
            ("handshake" | "sniff", "--json") if bare_json(cmd, next) => {
                notice(notice_for(
                    &format!("{cmd} --json without a file"),
                    "--json - (stdout) or --json FILE",
                ));
                out.argv.extend(["--json".into(), "-".into()]);
            }
            ("profile", "-o" | "--output") => {
                notice(notice_for(&format!("profile {text} DIR"), "--out-dir DIR"));
                out.argv.push("--out-dir".into());
            }
            ("profile", t)
                if t.starts_with("--output=") || (t.starts_with("-o") && t.len() > 2) =>
            {
                let dir = t.trim_start_matches("--output=").trim_start_matches("-o");
                notice(notice_for("profile -o DIR", "--out-dir DIR"));
                out.argv.push(format!("--out-dir={dir}").into());
            }
            ("trace" | "sniff", "-c") => {
                let name = next.and_then(OsStr::to_str).unwrap_or_default();
                refuse_count(cmd, name)?;
                notice(notice_for(&format!("{cmd} -c NAME"), "--comm NAME"));
                out.argv.push("--comm".into());
            }
            ("trace" | "sniff", t) if t.starts_with("-c") && t.len() > 2 => {
                let name = &t[2..];
                refuse_count(cmd, name)?;
                notice(notice_for(&format!("{cmd} -c NAME"), "--comm NAME"));
                out.argv.push(format!("--comm={name}").into());
            }
            _ => out.argv.push(token),
        }
    }
    Ok(out)
}

/// The notice for an old spelling: what to write now, and that the old one goes.
fn notice_for(old: &str, new: &str) -> String {
    format!("tlsscope: note: {old} is now {new}; the old spelling goes in the next release")
}

/// Whether `--json` stands alone (the old switch): nothing after it, another option, or (for
/// handshake, whose target comes last) a target such as `127.0.0.1:4433` that is no file.
fn bare_json(cmd: &str, next: Option<&OsStr>) -> bool {
    let Some(next) = next.and_then(OsStr::to_str) else {
        return next.is_none();
    };
    if next == "-" {
        return false;
    }
    if next.starts_with('-') {
        return true;
    }
    cmd == "handshake" && looks_like_target(next) && !std::path::Path::new(next).exists()
}

/// `HOST:PORT`, `[IPv6]:PORT` or an https URL, as handshake takes its target.
fn looks_like_target(s: &str) -> bool {
    s.starts_with("https://")
        || s.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !port.is_empty() && port.chars().all(|c| c.is_ascii_digit())
        })
}

/// `trace -c 16`: bench's connection count, which trace and sniff do not have.
fn refuse_count(cmd: &str, name: &str) -> Result<(), String> {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "{cmd} -c {name}: {cmd} has no connection count (-c is bench's); to pick threads named {name:?}, use --comm {name}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn respelled(args: &[&str]) -> Result<(Vec<String>, usize), String> {
        let argv = std::iter::once("tlsscope")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        respell(argv).map(|r| {
            (
                r.argv
                    .iter()
                    .skip(1)
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
                r.notices.len(),
            )
        })
    }

    #[test]
    fn new_spellings_pass_unchanged_without_a_notice() {
        for args in [
            &["bench", "-n", "5", "--json", "-"][..],
            &["handshake", "--json", "-", "127.0.0.1:4433"],
            &["handshake", "--json", "out.json"],
            &["trace", "--comm", "nginx", "-p", "1"],
            &["profile", "--out-dir", "d", "-p", "1"],
            &[
                "trace", "-p", "1", "--", "curl", "-c", "16", "-o", "x", "--json",
            ],
            &["--openssl", "-c", "bench"],
        ] {
            let (argv, notices) = respelled(args).unwrap();
            assert_eq!(argv, args, "{args:?}");
            assert_eq!(notices, 0, "{args:?}");
        }
    }

    #[test]
    fn old_spellings_become_new_ones_with_one_notice_each() {
        for (old, new) in [
            (
                &["bench", "--requests", "5"][..],
                &["bench", "--count", "5"][..],
            ),
            (&["bench", "--requests=5"], &["bench", "--count=5"]),
            (&["handshake", "--json"], &["handshake", "--json", "-"]),
            (
                &["handshake", "--json", "127.0.0.1:4433"],
                &["handshake", "--json", "-", "127.0.0.1:4433"],
            ),
            (
                &["sniff", "--json", "-o", "f"],
                &["sniff", "--json", "-", "-o", "f"],
            ),
            (&["profile", "-o", "d"], &["profile", "--out-dir", "d"]),
            (&["profile", "-od"], &["profile", "--out-dir=d"]),
            (
                &["profile", "--output", "d"],
                &["profile", "--out-dir", "d"],
            ),
            (&["trace", "-c", "nginx"], &["trace", "--comm", "nginx"]),
            (&["sniff", "-cnginx"], &["sniff", "--comm=nginx"]),
            (
                &["bench", "--requests", "5", "--requests", "6"],
                &["bench", "--count", "5", "--count", "6"],
            ),
        ] {
            let (argv, notices) = respelled(old).unwrap();
            assert_eq!(argv, new, "{old:?}");
            assert_eq!(notices, 1, "{old:?}");
        }
    }

    #[test]
    fn a_connection_count_given_to_trace_is_refused() {
        for args in [&["trace", "-p", "1", "-c", "16"][..], &["sniff", "-c16"]] {
            let e = respelled(args).unwrap_err();
            assert!(
                e.contains("no connection count") && e.contains("--comm"),
                "{e}"
            );
        }
    }
}
