//! Mapping OpenSSL versions to openssl-src crate versions: a built-in table, and cargo's
//! local index cache for everything else.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::BuildError;

/// OpenSSL version -> openssl-src crate version, for the releases used most often.
pub const KNOWN_RELEASES: &[(&str, &str)] = &[
    ("1.1.1w", "111.28.2"),
    ("3.0.2", "300.0.5"),
    ("3.0.8", "300.0.13"),
    ("3.1.3", "300.1.5"),
    ("3.1.4", "300.1.6"),
    ("3.2.1", "300.2.3"),
    ("3.3.2", "300.3.2"),
    ("3.4.1", "300.4.2"),
    ("3.5.5", "300.5.5"),
    ("3.6.3", "300.6.1"),
    ("4.0.3", "400.0.2"),
];

/// Returns the openssl-src crate version of `openssl_version` from the built-in table.
pub(crate) fn builtin_crate_version(openssl_version: &str) -> Option<&'static str> {
    KNOWN_RELEASES
        .iter()
        .find(|(openssl, _)| *openssl == openssl_version)
        .map(|(_, krate)| *krate)
}

/// Checks that `version` looks like an OpenSSL version ("1.1.1w", "3.2.0-alpha1"), which also
/// makes it safe as a directory name.
pub(crate) fn validate_version(version: &str) -> Result<(), BuildError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '-';
    let well_formed = !version.is_empty()
        && version.len() <= 40
        && version.starts_with(|c: char| c.is_ascii_digit())
        && version.chars().all(allowed)
        && !version.contains("..")
        && version.contains('.');
    if well_formed {
        Ok(())
    } else {
        Err(BuildError::InvalidVersion {
            version: version.to_owned(),
        })
    }
}

/// Orders OpenSSL (or crate) versions naturally: "3.0.10" after "3.0.9", "1.1.1w" after "1.1.1v".
pub(crate) fn compare_versions(a: &str, b: &str) -> Ordering {
    let mut left = a.split(['.', '-', '+']);
    let mut right = b.split(['.', '-', '+']);
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => match compare_component(x, y) {
                Ordering::Equal => continue,
                unequal => return unequal,
            },
        }
    }
}

/// Compares one dot-separated component: numeric prefix first, then the rest as text.
fn compare_component(a: &str, b: &str) -> Ordering {
    let (a_digits, a_rest) = split_numeric_prefix(a);
    let (b_digits, b_rest) = split_numeric_prefix(b);
    let a_number: u64 = a_digits.parse().unwrap_or(0);
    let b_number: u64 = b_digits.parse().unwrap_or(0);
    a_number.cmp(&b_number).then_with(|| a_rest.cmp(b_rest))
}

/// Splits "1w" into ("1", "w").
fn split_numeric_prefix(component: &str) -> (&str, &str) {
    let digits_len = component.chars().take_while(char::is_ascii_digit).count();
    component.split_at(digits_len)
}

/// One release record of cargo's index cache (only the fields used here).
#[derive(Debug, Deserialize)]
struct IndexRecord {
    name: String,
    vers: String,
    #[serde(default)]
    yanked: bool,
}

/// A non-yanked openssl-src release: its crate version and the OpenSSL version it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CrateRelease {
    /// The full crate version, e.g. "300.1.5+3.1.3".
    pub crate_version: String,
    /// The OpenSSL version from the build metadata, e.g. "3.1.3".
    pub openssl_version: String,
}

/// Parses cargo's index cache file for openssl-src: a small binary header, then NUL-separated
/// pairs of (version, JSON record). Yanked, pre-release and metadata-less releases are skipped.
pub(crate) fn parse_index_cache(bytes: &[u8]) -> Vec<CrateRelease> {
    bytes
        .split(|&byte| byte == 0)
        .filter(|piece| piece.first() == Some(&b'{'))
        .filter_map(|piece| serde_json::from_slice::<IndexRecord>(piece).ok())
        .filter(|record| record.name == "openssl-src" && !record.yanked)
        .filter_map(|record| release_of(&record.vers))
        .collect()
}

/// Splits "300.1.5+3.1.3" into a release; None for pre-releases or versions without metadata.
fn release_of(crate_version: &str) -> Option<CrateRelease> {
    let (core, metadata) = crate_version.split_once('+')?;
    if core.contains('-') || metadata.is_empty() {
        return None;
    }
    Some(CrateRelease {
        crate_version: crate_version.to_owned(),
        openssl_version: metadata.to_owned(),
    })
}

/// Picks the highest crate version that carries `openssl_version`.
pub(crate) fn newest_release_of(
    releases: &[CrateRelease],
    openssl_version: &str,
) -> Option<String> {
    releases
        .iter()
        .filter(|release| release.openssl_version == openssl_version)
        .map(|release| release.crate_version.as_str())
        .max_by(|a, b| compare_versions(a, b))
        .map(str::to_owned)
}

/// The distinct OpenSSL versions in `releases`, oldest first, comma-separated.
pub(crate) fn known_openssl_versions(releases: &[CrateRelease]) -> String {
    let mut versions: Vec<&str> = releases
        .iter()
        .map(|r| r.openssl_version.as_str())
        .collect();
    if versions.is_empty() {
        versions = KNOWN_RELEASES.iter().map(|(openssl, _)| *openssl).collect();
    }
    versions.sort_by(|a, b| compare_versions(a, b));
    versions.dedup();
    versions.join(", ")
}

/// Every copy of the openssl-src index cache under `<cargo_home>/registry/index/*/`.
pub(crate) fn index_cache_files(cargo_home: &Path) -> Vec<PathBuf> {
    let index_root = cargo_home.join("registry").join("index");
    let Ok(entries) = std::fs::read_dir(&index_root) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path().join(".cache/op/en/openssl-src"))
        .filter(|path| path.is_file())
        .collect()
}

/// Reads and merges all openssl-src index caches under `cargo_home` (unreadable ones are skipped:
/// the caller reports an unknown version if nothing usable remains).
pub(crate) fn read_index_caches(cargo_home: &Path) -> Vec<CrateRelease> {
    index_cache_files(cargo_home)
        .iter()
        .filter_map(|path| std::fs::read(path).ok())
        .flat_map(|bytes| parse_index_cache(&bytes))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds an index cache file the way cargo lays it out: header, then (version, JSON) pairs.
    fn fixture(records: &[(&str, bool)]) -> Vec<u8> {
        let mut bytes = vec![3u8, 2, 0, 0, 0];
        bytes.extend_from_slice(b"Unknown\0");
        for (vers, yanked) in records {
            bytes.extend_from_slice(vers.as_bytes());
            bytes.push(0);
            let json = format!(
                r#"{{"name": "openssl-src", "vers": "{vers}", "deps": [], "cksum": "00", "features": {{}}, "yanked": {yanked}}}"#
            );
            bytes.extend_from_slice(json.as_bytes());
            bytes.push(0);
        }
        bytes
    }

    #[test]
    fn build_index_parser_picks_highest_non_yanked_release() {
        let bytes = fixture(&[
            ("110.0.0", false),
            ("300.1.4+3.1.2", false),
            ("300.1.5+3.1.3", false),
            ("300.1.10+3.1.3", true),
            ("300.1.9+3.1.3", false),
            ("300.1.11-rc1+3.1.3", false),
            ("111.8.0+1.1.1f", true),
        ]);
        let releases = parse_index_cache(&bytes);
        assert_eq!(
            newest_release_of(&releases, "3.1.3").as_deref(),
            Some("300.1.9+3.1.3")
        );
        assert_eq!(
            newest_release_of(&releases, "3.1.2").as_deref(),
            Some("300.1.4+3.1.2")
        );
        assert_eq!(
            newest_release_of(&releases, "1.1.1f"),
            None,
            "only release is yanked"
        );
        assert_eq!(newest_release_of(&releases, "3.9.9"), None);
        assert_eq!(known_openssl_versions(&releases), "3.1.2, 3.1.3");
    }

    #[test]
    fn build_index_parser_ignores_garbage() {
        assert!(parse_index_cache(b"").is_empty());
        assert!(parse_index_cache(b"\x03\x02\0\0\0Unknown\0{not json\0").is_empty());
    }

    #[test]
    fn build_index_cache_files_are_found_under_cargo_home() {
        let home = std::env::temp_dir().join(format!("ossl-index-test-{}", std::process::id()));
        let cache_dir = home.join("registry/index/example-0123/.cache/op/en");
        std::fs::create_dir_all(&cache_dir).unwrap();
        std::fs::write(
            cache_dir.join("openssl-src"),
            fixture(&[("300.0.5+3.0.2", false)]),
        )
        .unwrap();
        let releases = read_index_caches(&home);
        std::fs::remove_dir_all(&home).unwrap();
        assert_eq!(
            newest_release_of(&releases, "3.0.2").as_deref(),
            Some("300.0.5+3.0.2")
        );
    }

    #[test]
    fn build_versions_compare_naturally() {
        assert_eq!(compare_versions("3.0.10", "3.0.9"), Ordering::Greater);
        assert_eq!(compare_versions("1.1.1w", "1.1.1v"), Ordering::Greater);
        assert_eq!(
            compare_versions("300.1.10+3.1.3", "300.1.9+3.1.3"),
            Ordering::Greater
        );
        assert_eq!(compare_versions("1.1.1w", "3.0.2"), Ordering::Less);
    }

    #[test]
    fn build_versions_are_validated() {
        for good in ["1.1.1w", "3.0.2", "3.2.0-alpha1"] {
            assert!(validate_version(good).is_ok(), "{good}");
        }
        for bad in ["", "latest", "../3.0.2", "3..0", "3.0.2/x", "3 0 2", "3"] {
            assert!(validate_version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn build_builtin_table_has_the_documented_releases() {
        assert_eq!(builtin_crate_version("1.1.1w"), Some("111.28.2"));
        assert_eq!(builtin_crate_version("4.0.3"), Some("400.0.2"));
        assert_eq!(builtin_crate_version("3.9.9"), None);
    }
}
