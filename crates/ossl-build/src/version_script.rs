//! Linker version scripts for libcrypto and libssl, written from OpenSSL's ordinal files
//! (`util/libcrypto.num`, `util/libssl.num`).
//!
//! OpenSSL's Makefile writes `libcrypto.ld` and `libssl.ld` with `util/mkdef.pl`, which the
//! openssl-src crate drops from its 3.5 and later copies. The inputs are still there, so for
//! those trees tlsscope writes the scripts itself, the way an ELF shared build of OpenSSL has
//! them: one node per release named `OPENSSL_<version>` (`OPENSSL_3.0.0`, `OPENSSL_3.5.0`),
//! each later node inheriting the one before, and `local: *;` hiding everything not listed.
//!
//! A line of an ordinal file is `NAME NUMBER VERSION EXIST|NOEXIST:PLATFORMS:KIND:FEATURES`,
//! e.g. `SSL_get_selected_srtp_profile 1 3_0_0 EXIST::FUNCTION:SRTP`; `#` starts a comment.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::process::run_captured;
use super::BuildError;

/// The shared libraries whose version scripts are written, by their base name.
pub(crate) const LIBRARIES: [&str; 2] = ["libcrypto", "libssl"];

/// The platform tags of the `.num` files that hold on Linux (mkdef.pl's "linux" family).
const LINUX_PLATFORMS: &[&str] = &["UNIX"];

/// The release a symbol first appeared in, as the `.num` file spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SymbolVersion {
    /// `*`: the symbol is not versioned (engines and modules).
    Unversioned,
    /// `3_0_0`, `1_1_1d`: numbers, then at most two letters.
    Release {
        /// The numeric components, e.g. [3, 0, 0].
        numbers: Vec<u32>,
        /// The letter suffix of 1.x releases, e.g. "d"; empty for 3.x.
        letters: String,
    },
}

impl SymbolVersion {
    /// Parses `3_0_0`, `1_1_0d` or `*`.
    fn parse(text: &str) -> Option<Self> {
        if text == "*" {
            return Some(SymbolVersion::Unversioned);
        }
        let parts: Vec<&str> = text.split('_').collect();
        if parts.len() != 3 {
            return None;
        }
        let (last_digits, letters) = parts[2].split_at(
            parts[2]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(parts[2].len()),
        );
        if letters.len() > 2 || !letters.chars().all(|c| c.is_ascii_lowercase()) {
            return None;
        }
        let numbers = [parts[0], parts[1], last_digits]
            .iter()
            .map(|p| {
                if p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) {
                    None
                } else {
                    p.parse().ok()
                }
            })
            .collect::<Option<Vec<u32>>>()?;
        Some(SymbolVersion::Release {
            numbers,
            letters: letters.to_owned(),
        })
    }

    /// The version node's name as OpenSSL names it (`OPENSSL_3.0.0`); None when unversioned.
    fn node_name(&self) -> Option<String> {
        match self {
            SymbolVersion::Unversioned => None,
            SymbolVersion::Release { numbers, letters } => {
                let dotted: Vec<String> = numbers.iter().map(u32::to_string).collect();
                Some(format!("OPENSSL_{}{letters}", dotted.join(".")))
            }
        }
    }
}

impl Ord for SymbolVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (SymbolVersion::Unversioned, SymbolVersion::Unversioned) => Ordering::Equal,
            (SymbolVersion::Unversioned, _) => Ordering::Less,
            (_, SymbolVersion::Unversioned) => Ordering::Greater,
            (
                SymbolVersion::Release {
                    numbers: a,
                    letters: a_letters,
                },
                SymbolVersion::Release {
                    numbers: b,
                    letters: b_letters,
                },
            ) => a.cmp(b).then_with(|| {
                // "z" < "za": a shorter suffix is the earlier release.
                a_letters
                    .len()
                    .cmp(&b_letters.len())
                    .then_with(|| a_letters.cmp(b_letters))
            }),
        }
    }
}

impl PartialOrd for SymbolVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One line of an ordinal file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ordinal {
    /// The symbol name.
    pub name: String,
    /// The release that added it.
    pub version: SymbolVersion,
    /// False for `NOEXIST`: a retired or reserved number, not in the library.
    pub exists: bool,
    /// Platform tags (`UNIX`, `!VMS`, `_WIN32`); empty means every platform.
    pub platforms: Vec<String>,
    /// The feature tags (`SRTP`, `DEPRECATEDIN_3_0`); the symbol is built only with all of them.
    pub features: Vec<String>,
}

/// Parses the text of an ordinal file; `path` only names the file in errors.
pub(crate) fn parse_ordinals(path: &Path, text: &str) -> Result<Vec<Ordinal>, BuildError> {
    let mut ordinals = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |detail: String| BuildError::BadOrdinals {
            path: path.to_owned(),
            line: index + 1,
            detail,
        };
        ordinals.push(parse_line(line).map_err(bad)?);
    }
    Ok(ordinals)
}

/// Parses one non-empty, comment-free line; the error says which field is wrong.
fn parse_line(line: &str) -> Result<Ordinal, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [name, number, version, info] = fields[..] else {
        return Err(format!(
            "expected 4 fields (name, number, version, EXIST:platforms:kind:features), found {}",
            fields.len()
        ));
    };
    let symbol_like = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if !name.chars().all(symbol_like) || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("'{name}' is not a symbol name"));
    }
    // mknum.pl writes '?' (or '?+') for a number not assigned yet.
    if !(number.chars().all(|c| c.is_ascii_digit()) || number.starts_with('?')) {
        return Err(format!("'{number}' is not an ordinal number"));
    }
    let version = SymbolVersion::parse(version)
        .ok_or_else(|| format!("'{version}' is not a version like 3_0_0 or *"))?;
    let info_fields: Vec<&str> = info.split(':').collect();
    let [existence, platforms, kind, features] = info_fields[..] else {
        return Err(format!(
            "'{info}' does not have the 4 parts EXIST:platforms:kind:features"
        ));
    };
    let exists = match existence {
        "EXIST" => true,
        "NOEXIST" => false,
        other => return Err(format!("'{other}' is neither EXIST nor NOEXIST")),
    };
    if !matches!(kind, "FUNCTION" | "VARIABLE") {
        return Err(format!("'{kind}' is neither FUNCTION nor VARIABLE"));
    }
    let list = |text: &str| -> Vec<String> {
        text.split(',')
            .filter(|tag| !tag.is_empty())
            .map(str::to_owned)
            .collect()
    };
    Ok(Ordinal {
        name: name.to_owned(),
        version,
        exists,
        platforms: list(platforms),
        features: list(features),
    })
}

/// Which symbols a build has: the platform it targets and the features Configure disabled.
#[derive(Debug, Clone)]
pub(crate) struct BuildFeatures {
    /// Platform tags that hold for the target (`UNIX` on Linux).
    pub platforms: &'static [&'static str],
    /// Configure's disabled features, as the `.num` files spell them (`SSL3_METHOD`).
    pub disabled: BTreeSet<String>,
}

impl BuildFeatures {
    /// A Linux build with Configure's `%disabled` keys (`ssl3-method`, `md2`, ...).
    pub fn linux<'a>(disabled: impl IntoIterator<Item = &'a str>) -> Self {
        BuildFeatures {
            platforms: LINUX_PLATFORMS,
            disabled: disabled
                .into_iter()
                .map(|key| key.to_ascii_uppercase().replace('-', "_"))
                .collect(),
        }
    }

    /// Whether the library built with these settings contains `ordinal`.
    fn includes(&self, ordinal: &Ordinal) -> bool {
        ordinal.exists && self.platform_holds(ordinal) && self.features_built(ordinal)
    }

    /// A platform list holds unless it names another platform positively or ours negated
    /// (`!VMS` holds on Linux, `VMS` and `!UNIX` do not), as mkdef.pl reads it.
    fn platform_holds(&self, ordinal: &Ordinal) -> bool {
        for tag in &ordinal.platforms {
            let (negated, platform) = match tag.strip_prefix('!') {
                Some(platform) => (true, platform),
                None => (false, tag.as_str()),
            };
            if self.platforms.contains(&platform) {
                return !negated;
            }
            if !negated {
                return false;
            }
        }
        true
    }

    /// Every feature must be built. `DEPRECATEDIN_x_y` symbols go when `deprecated` is
    /// disabled (tlsscope never passes `--api`, so that removes all of them).
    fn features_built(&self, ordinal: &Ordinal) -> bool {
        let no_deprecated = self.disabled.contains("DEPRECATED");
        let disabled = |feature: &String| {
            self.disabled.contains(feature)
                || (no_deprecated && feature.starts_with("DEPRECATEDIN_"))
        };
        !ordinal.features.iter().any(disabled)
    }
}

/// Writes the GNU ld version script of the symbols `features` includes: one node per release,
/// oldest first, each inheriting the previous one; `local: *;` in the first hides the rest.
pub(crate) fn write_version_script(
    path: &Path,
    ordinals: &[Ordinal],
    features: &BuildFeatures,
) -> Result<String, BuildError> {
    let mut by_version: BTreeMap<&SymbolVersion, BTreeSet<&str>> = BTreeMap::new();
    for ordinal in ordinals.iter().filter(|o| features.includes(o)) {
        by_version
            .entry(&ordinal.version)
            .or_default()
            .insert(&ordinal.name);
    }
    if by_version.contains_key(&SymbolVersion::Unversioned) && by_version.len() > 1 {
        return Err(BuildError::VersionScript {
            path: path.to_owned(),
            detail: "it mixes versioned and unversioned (*) symbols".to_owned(),
        });
    }
    let mut script = String::new();
    let mut previous: Option<String> = None;
    for (version, names) in by_version {
        let node = version.node_name();
        match &node {
            Some(name) => {
                let _ = writeln!(script, "{name} {{");
            }
            None => script.push_str("{\n"),
        }
        script.push_str("    global:\n");
        for name in names {
            let _ = writeln!(script, "        {name};");
        }
        if previous.is_none() {
            script.push_str("    local: *;\n");
        }
        match &previous {
            Some(parent) => {
                let _ = writeln!(script, "}} {parent};");
            }
            None => script.push_str("};\n"),
        }
        previous = node;
    }
    Ok(script)
}

/// Configure's disabled features of the configured tree `tree`, read from its `configdata.pm`
/// (the same table mkdef.pl consults).
fn disabled_features(tree: &Path) -> Result<Vec<String>, BuildError> {
    let mut command = Command::new("perl");
    command.current_dir(tree).args([
        "-I.",
        "-Mconfigdata",
        "-e",
        r#"print "$_\n" for sort keys %disabled"#,
    ]);
    let (status, output) = run_captured(&mut command)?;
    if !status.success() {
        return Err(BuildError::VersionScript {
            path: tree.join("configdata.pm"),
            detail: format!("perl could not read its %disabled table: {}", output.trim()),
        });
    }
    Ok(output.lines().map(str::to_owned).collect())
}

/// For a configured tree without `util/mkdef.pl`: writes `libcrypto.ld` and `libssl.ld` from
/// the `.num` files and points the Makefile's rules for them at their real inputs.
pub(crate) fn write_for_tree(tree: &Path) -> Result<(), BuildError> {
    let disabled = disabled_features(tree)?;
    let features = BuildFeatures::linux(disabled.iter().map(String::as_str));
    let makefile_path = tree.join("Makefile");
    let mut makefile = std::fs::read_to_string(&makefile_path)
        .map_err(|e| BuildError::io("read", &makefile_path, e))?;
    for library in LIBRARIES {
        let num_path = tree.join("util").join(format!("{library}.num"));
        let text =
            std::fs::read_to_string(&num_path).map_err(|e| BuildError::io("read", &num_path, e))?;
        let ordinals = parse_ordinals(&num_path, &text)?;
        let script = write_version_script(&num_path, &ordinals, &features)?;
        let script_path = tree.join(format!("{library}.ld"));
        std::fs::write(&script_path, script)
            .map_err(|e| BuildError::io("write", &script_path, e))?;
        makefile =
            replace_script_rule(&makefile, library).ok_or_else(|| BuildError::VersionScript {
                path: makefile_path.clone(),
                detail: format!("it has no rule for {library}.ld to replace"),
            })?;
    }
    std::fs::write(&makefile_path, makefile).map_err(|e| BuildError::io("write", &makefile_path, e))
}

/// Replaces the Makefile rule `<library>.ld: ... util/mkdef.pl` and its recipe.
///
/// Make must not try to regenerate the script: OpenSSL's rule lists `util/mkdef.pl` as a
/// prerequisite, and make stops on a missing prerequisite it has no rule for. The new rule keeps
/// the script's real inputs (the `.num` file and `configdata.pm`, both older than the script
/// written after Configure), so make finds it up to date; should an input ever be newer, its
/// recipe fails with a line saying why instead of building with a stale script.
fn replace_script_rule(makefile: &str, library: &str) -> Option<String> {
    let head = format!("{library}.ld:");
    let mut out = String::with_capacity(makefile.len());
    let mut lines = makefile.lines().peekable();
    let mut replaced = false;
    while let Some(line) = lines.next() {
        if !replaced && line.starts_with(&head) && line.contains("mkdef.pl") {
            while lines.peek().is_some_and(|next| next.starts_with('\t')) {
                lines.next();
            }
            let _ = writeln!(
                out,
                "# {library}.ld is written by tlsscope from util/{library}.num after Configure \
                 (this source tree has no util/mkdef.pl).\n\
                 {library}.ld: util/{library}.num configdata.pm\n\
                 \t@echo '{library}.ld is older than its inputs: tlsscope writes it after \
                 Configure; build again with tlsscope' >&2; exit 1"
            );
            replaced = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    replaced.then_some(out)
}

/// The ordinal files a tree needs for [`write_for_tree`], first missing one if any.
pub(crate) fn missing_input(tree: &Path) -> Option<PathBuf> {
    LIBRARIES
        .iter()
        .map(|library| PathBuf::from("util").join(format!("{library}.num")))
        .find(|relative| !tree.join(relative).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Ordinal>, BuildError> {
        parse_ordinals(Path::new("util/libssl.num"), text)
    }

    fn script(text: &str, disabled: &[&str]) -> String {
        let ordinals = parse(text).unwrap();
        write_version_script(
            Path::new("util/libssl.num"),
            &ordinals,
            &BuildFeatures::linux(disabled.iter().copied()),
        )
        .unwrap()
    }

    #[test]
    fn version_script_nodes_follow_releases_and_inherit() {
        let num = "\
SSL_new                          1\t3_0_0\tEXIST::FUNCTION:
SSL_CTX_set1_groups_list         3\t3_0_0\tEXIST::FUNCTION:
SSL_get0_group_name              4\t3_2_0\tEXIST::FUNCTION:
SSL_CTX_set_domain_flags         5\t3_5_0\tEXIST::FUNCTION:
SSL_poll                         6\t3_3_0\tEXIST::FUNCTION:QUIC
SSL_set_tmp_dh_callback          7\t3_0_0\tEXIST::FUNCTION:DEPRECATEDIN_3_0,DH
";
        assert_eq!(
            script(num, &["md2"]),
            "OPENSSL_3.0.0 {\n    global:\n        SSL_CTX_set1_groups_list;\n        \
             SSL_new;\n        SSL_set_tmp_dh_callback;\n    local: *;\n};\n\
             OPENSSL_3.2.0 {\n    global:\n        SSL_get0_group_name;\n} OPENSSL_3.0.0;\n\
             OPENSSL_3.3.0 {\n    global:\n        SSL_poll;\n} OPENSSL_3.2.0;\n\
             OPENSSL_3.5.0 {\n    global:\n        SSL_CTX_set_domain_flags;\n} OPENSSL_3.3.0;\n"
        );
    }

    #[test]
    fn version_script_leaves_out_noexist_other_platforms_and_disabled_features() {
        let num = "\
keep_plain          1\t3_0_0\tEXIST::FUNCTION:
keep_unix           2\t3_0_0\tEXIST:UNIX:FUNCTION:
keep_not_vms        3\t3_0_0\tEXIST:!VMS:FUNCTION:
keep_variable       4\t3_0_0\tEXIST::VARIABLE:
drop_noexist        5\t3_0_0\tNOEXIST::FUNCTION:
drop_vms            6\t3_0_0\tEXIST:VMS:FUNCTION:
drop_windows        7\t3_0_0\tEXIST:_WIN32,VMS:FUNCTION:
drop_not_unix       8\t3_0_0\tEXIST:!UNIX:FUNCTION:
drop_ssl3           9\t3_0_0\tEXIST::FUNCTION:SSL3_METHOD
drop_one_of_two    10\t3_0_0\tEXIST::FUNCTION:SRTP,EC_NISTP_64_GCC_128
drop_late_noexist  11\t3_4_0\tNOEXIST::FUNCTION:
";
        let text = script(num, &["ssl3-method", "ec_nistp_64_gcc_128"]);
        for kept in ["keep_plain", "keep_unix", "keep_not_vms", "keep_variable"] {
            assert!(text.contains(&format!(" {kept};")), "{kept}: {text}");
        }
        assert!(!text.contains("drop_"), "{text}");
        assert!(
            !text.contains("OPENSSL_3.4.0"),
            "a release left with no symbols gets no node: {text}"
        );
    }

    #[test]
    fn version_script_drops_deprecated_symbols_only_without_deprecated() {
        let num =
            "old 1\t3_0_0\tEXIST::FUNCTION:DEPRECATEDIN_3_0\nnew 2\t3_0_0\tEXIST::FUNCTION:\n";
        assert!(script(num, &[]).contains(" old;"));
        let text = script(num, &["deprecated"]);
        assert!(!text.contains(" old;") && text.contains(" new;"), "{text}");
    }

    #[test]
    fn version_script_orders_releases_numerically_and_by_letter() {
        let num = "\
a 1\t1_1_0\tEXIST::FUNCTION:
b 2\t1_1_10\tEXIST::FUNCTION:
c 3\t1_1_9\tEXIST::FUNCTION:
d 4\t1_1_0d\tEXIST::FUNCTION:
e 5\t1_1_0za\tEXIST::FUNCTION:
f 6\t1_1_0z\tEXIST::FUNCTION:
";
        let text = script(num, &[]);
        let order: Vec<&str> = text
            .lines()
            .filter(|line| line.starts_with("OPENSSL_"))
            .map(|line| line.split(' ').next().unwrap())
            .collect();
        assert_eq!(
            order,
            [
                "OPENSSL_1.1.0",
                "OPENSSL_1.1.0d",
                "OPENSSL_1.1.0z",
                "OPENSSL_1.1.0za",
                "OPENSSL_1.1.9",
                "OPENSSL_1.1.10"
            ]
        );
    }

    #[test]
    fn version_script_of_unversioned_symbols_is_one_anonymous_node() {
        let num = "bind_engine 1\t*\tEXIST::FUNCTION:\nv_check 2\t*\tEXIST::FUNCTION:\n";
        assert_eq!(
            script(num, &[]),
            "{\n    global:\n        bind_engine;\n        v_check;\n    local: *;\n};\n"
        );
        let mixed = parse("a 1\t*\tEXIST::FUNCTION:\nb 2\t3_0_0\tEXIST::FUNCTION:\n").unwrap();
        let error = write_version_script(
            Path::new("util/libssl.num"),
            &mixed,
            &BuildFeatures::linux([]),
        )
        .unwrap_err();
        assert!(error.to_string().contains("util/libssl.num"), "{error}");
    }

    #[test]
    fn ordinals_skip_comments_and_blank_lines() {
        let num = "# header comment\n\n   \nSSL_new 1 3_0_0 EXIST::FUNCTION: # trailing\n\t\n";
        let ordinals = parse(num).unwrap();
        assert_eq!(ordinals.len(), 1);
        assert_eq!(ordinals[0].name, "SSL_new");
        assert!(parse("").unwrap().is_empty());
        assert!(parse("#only\n#comments").unwrap().is_empty());
        // Unassigned numbers from mknum.pl are accepted.
        assert_eq!(
            parse("X 1 3_0_0 EXIST::FUNCTION:\nY ? 3_5_0 EXIST::FUNCTION:\n")
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn ordinals_with_bad_fields_name_the_file_and_line() {
        let cases = [
            ("SSL_new 1 3_0_0", "4 fields"),
            ("SSL_new 1 3_0_0 EXIST::FUNCTION: extra", "4 fields"),
            ("SSL_new 1 3_0_0 MAYBE::FUNCTION:", "MAYBE"),
            ("SSL_new 1 3_0_0 EXIST::METHOD:", "METHOD"),
            ("SSL_new 1 3_0_0 EXIST:FUNCTION:", "4 parts"),
            ("SSL_new 1 3_0_0 EXIST::FUNCTION::", "4 parts"),
            ("SSL_new 1 3.0.0 EXIST::FUNCTION:", "3.0.0"),
            ("SSL_new 1 3_0 EXIST::FUNCTION:", "3_0"),
            ("SSL_new 1 3_0_0abc EXIST::FUNCTION:", "3_0_0abc"),
            ("SSL_new 1 3_x_0 EXIST::FUNCTION:", "3_x_0"),
            (
                "SSL_new 1 99999999999_0_0 EXIST::FUNCTION:",
                "99999999999_0_0",
            ),
            ("SSL_new one 3_0_0 EXIST::FUNCTION:", "one"),
            ("SSL-new 1 3_0_0 EXIST::FUNCTION:", "SSL-new"),
            ("1SSL 1 3_0_0 EXIST::FUNCTION:", "1SSL"),
            ("SSL_néw 1 3_0_0 EXIST::FUNCTION:", "SSL_néw"),
        ];
        for (line, named) in cases {
            let text = format!("# comment\n\nSSL_free 2 3_0_0 EXIST::FUNCTION:\n{line}\n");
            let error = parse(&text).unwrap_err();
            assert!(
                matches!(&error, BuildError::BadOrdinals { line: 4, .. }),
                "{line}: {error:?}"
            );
            let message = error.to_string();
            assert!(
                message.contains("util/libssl.num")
                    && message.contains("line 4")
                    && message.contains(named),
                "{line}: {message}"
            );
        }
    }

    #[test]
    fn makefile_rule_for_the_script_is_replaced_with_its_real_inputs() {
        let makefile = "\
all: libssl.so.3
libssl.ld: util/libssl.num configdata.pm util/perl/OpenSSL/Ordinals.pm $(SRCDIR)/util/mkdef.pl
\t$(PERL) $(SRCDIR)/util/mkdef.pl --version $(VERSION_NUMBER) --type lib --ordinals util/libssl.num  --name libssl --OS linux > libssl.ld
ssl/x.o: ssl/x.c
\t$(CC) -c ssl/x.c
";
        let replaced = replace_script_rule(makefile, "libssl").unwrap();
        assert!(!replaced.contains("mkdef.pl --version"), "{replaced}");
        assert!(replaced.contains("\nlibssl.ld: util/libssl.num configdata.pm\n\t@echo"));
        assert!(replaced.starts_with("all: libssl.so.3\n"));
        assert!(replaced.ends_with("ssl/x.o: ssl/x.c\n\t$(CC) -c ssl/x.c\n"));
        assert_eq!(replace_script_rule(makefile, "libcrypto"), None);
    }
}
