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
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
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
    }
}
