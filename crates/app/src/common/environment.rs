//! Where a run was made: versions, kernel, CPU, command line, time.

use std::time::{SystemTime, UNIX_EPOCH};

use model::Environment;

/// Describes this machine and the run (`command_line` as the user typed it), with the OpenSSL
/// under test.
pub fn collect(lib: &ossl::Library, command_line: Vec<String>) -> Environment {
    Environment {
        library: lib.name().to_string(),
        library_flavour: lib.flavour().name().to_string(),
        library_version_number: lib.version().number,
        library_path: lib.ssl_path().display().to_string(),
        ..host(command_line)
    }
}

/// Describes this machine and the run; no OpenSSL loaded (the library fields stay empty).
pub fn host(command_line: Vec<String>) -> Environment {
    let uname = uname();
    Environment {
        tlsscope_version: env!("CARGO_PKG_VERSION").to_string(),
        library: String::new(),
        library_flavour: String::new(),
        library_version_number: 0,
        library_path: String::new(),
        kernel: format!("{} {} {}", uname.0, uname.1, uname.3),
        cpu_model: cpu_model(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        hostname: uname.2,
        command_line,
        started_at: rfc3339_now(),
        traced_libraries: Vec::new(),
    }
}

/// Adds each library file the probes are in (each once, in order), as it names itself; the
/// first that names itself also fills the environment's `library` fields.
pub fn note_traced<'a>(environment: &mut Environment, paths: impl IntoIterator<Item = &'a str>) {
    for path in paths {
        if environment.traced_libraries.iter().any(|l| l.path == path) {
            continue;
        }
        let version = ossl::version_of_file(std::path::Path::new(path));
        let (text, number) = version.map_or((String::new(), 0), |v| (v.text, v.number));
        if environment.library.is_empty() && !text.is_empty() {
            environment.library_flavour = ossl::Flavour::from_version_text(&text)
                .map(|f| f.name().to_string())
                .unwrap_or_default();
            environment.library = text.clone();
            environment.library_version_number = number;
            environment.library_path = path.to_string();
        }
        environment.traced_libraries.push(model::TracedLibrary {
            path: path.to_string(),
            version: text,
            version_number: number,
        });
    }
}

/// (sysname, release, nodename, machine).
fn uname() -> (String, String, String, String) {
    // SAFETY: uname fills the zeroed struct; its fields are NUL-terminated C strings.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return Default::default();
        }
        let s = |f: &[libc::c_char]| {
            std::ffi::CStr::from_ptr(f.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        (s(&u.sysname), s(&u.release), s(&u.nodename), s(&u.machine))
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// The current UTC time as "2026-11-22T15:11:28Z".
pub fn rfc3339_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{}Z", date_time(secs))
}

/// Unix seconds as "2026-11-22T15:11:28" (UTC, no zone).
fn date_time(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `t` as RFC 3339 in UTC with nanoseconds: "2026-11-28T10:00:00.250000000Z".
pub fn rfc3339_ns(t: SystemTime) -> String {
    let ns = host::clock::unix_ns(t);
    format!(
        "{}.{:09}Z",
        date_time(ns / 1_000_000_000),
        ns % 1_000_000_000
    )
}

/// An RFC 3339 date-time ("2026-11-28T10:00:00.250Z", "2026-11-28T11:00:00+01:00"; a space
/// or a lower-case t/z is taken too) as a wall-clock time. The error says what is wrong.
pub fn parse_rfc3339(s: &str) -> std::result::Result<SystemTime, String> {
    const FORM: &str =
        "expected an RFC 3339 time such as 2026-11-28T10:00:00.250Z or 2026-11-28T11:00:00+01:00";
    let b = s.as_bytes();
    let digits = |from: usize, len: usize| -> std::result::Result<i64, String> {
        let part = b.get(from..from + len).ok_or(FORM)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(FORM.to_string());
        }
        Ok(part.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let at = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":")) {
        return Err(FORM.to_string());
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month) || day < 1 || day > month_days[month as usize - 1] {
        return Err(format!("{s}: no such date"));
    }
    if hour > 23 || minute > 59 || second > 60 {
        return Err(format!("{s}: no such time of day"));
    }
    let mut i = 19;
    let mut nanos = 0i64;
    if at(i, b".") {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 9 {
                nanos = nanos * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return Err(FORM.to_string());
        }
        nanos *= 10i64.pow(9u32.saturating_sub((i - start) as u32));
    }
    let offset_s = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && at(i + 3, b":") => {
            let (h, m) = (digits(i + 1, 2)?, digits(i + 4, 2)?);
            if h > 23 || m > 59 {
                return Err(format!("{s}: no such UTC offset"));
            }
            (h * 3600 + m * 60) * if sign == b'-' { -1 } else { 1 }
        }
        _ => return Err(format!("{FORM} (with Z or a UTC offset)")),
    };
    // A leap second is the second before the next minute, as the Unix clock counts it.
    let second = second.min(59);
    let days = days_from_civil(year, month as u32, day as u32);
    let unix_s = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    let unix_ns = i128::from(unix_s) * 1_000_000_000 + i128::from(nanos);
    let ns = u64::try_from(unix_ns).map_err(|_| format!("{s}: before 1970"))?;
    Ok(UNIX_EPOCH + std::time::Duration::from_nanos(ns))
}

/// (year, month, day) to days since 1970-01-01, proleptic Gregorian: the inverse of
/// [`civil_from_days`] (the same published algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// published algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_779), (2026, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        for days in [-800_000, -1, 0, 11_016, 20_785, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }

    fn unix_ns_of(s: &str) -> u64 {
        host::clock::unix_ns(parse_rfc3339(s).unwrap())
    }

    #[test]
    fn rfc3339_times_parse_with_fractions_and_offsets() {
        assert_eq!(unix_ns_of("1970-01-01T00:00:00Z"), 0);
        assert_eq!(
            unix_ns_of("2026-11-28T10:00:00.250Z"),
            1_795_860_000_250_000_000
        );
        // The same instant with an offset, lower-case letters, a space.
        assert_eq!(
            unix_ns_of("2026-11-28T11:00:00.25+01:00"),
            1_795_860_000_250_000_000
        );
        assert_eq!(
            unix_ns_of("2026-11-28 05:30:00.250-04:30"),
            1_795_860_000_250_000_000
        );
        assert_eq!(
            unix_ns_of("2026-11-28t10:00:00.250z"),
            1_795_860_000_250_000_000
        );
        // Nanoseconds kept; digits past them ignored.
        assert_eq!(
            unix_ns_of("1970-01-01T00:00:01.123456789123Z"),
            1_123_456_789
        );
        assert_eq!(unix_ns_of("2000-02-29T00:00:00Z"), 951_782_400_000_000_000);
    }

    #[test]
    fn malformed_rfc3339_times_are_refused_saying_the_form() {
        for bad in [
            "",
            "now",
            "10:00:00",
            "2026-11-28",
            "2026-11-28T10:00:00",
            "2026-11-28T10:00:00.Z",
            "2026-11-28T10:00Z",
            "2026-11-28T10:00:00+0100",
            "2026-11-28T10:00:00Zjunk",
            "2026-1x-28T10:00:00Z",
        ] {
            let e = parse_rfc3339(bad).unwrap_err();
            assert!(e.contains("RFC 3339"), "{bad}: {e}");
        }
        for (bad, why) in [
            ("2026-02-29T10:00:00Z", "no such date"),
            ("2026-13-01T10:00:00Z", "no such date"),
            ("2026-11-28T24:00:00Z", "no such time"),
            ("2026-11-28T10:00:00+25:00", "no such UTC offset"),
            ("1969-12-31T23:59:59Z", "before 1970"),
        ] {
            let e = parse_rfc3339(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn nanosecond_times_read_back_as_written() {
        let t = UNIX_EPOCH + std::time::Duration::from_nanos(1_795_860_000_250_000_001);
        let text = rfc3339_ns(t);
        assert_eq!(text, "2026-11-28T10:00:00.250000001Z");
        assert_eq!(parse_rfc3339(&text).unwrap(), t);
    }
}
