//! Shell completions and man pages, generated from the argument definitions: driven in the real
//! shells and rendered by the real `man`, and installed by the Makefile where those look.
//! The subcommands and flags checked are read from `tlsscope --help`, so one missing from the
//! generated files fails here.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::{self, assert_one_line_error, run_with_timeout, text};

const LIMIT: Duration = Duration::from_secs(120);

/// The workspace root, where the Makefile is.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs a command to completion; panics with its stderr unless it succeeds.
fn run_ok(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    let out = run_with_timeout(cmd, LIMIT);
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// `make install-extras` run with the tlsscope under test, everything staged under `destdir`.
fn install_extras(destdir: &Path) -> Output {
    run_ok(
        Command::new("make")
            .current_dir(workspace_root())
            .args(["--no-print-directory", "install-extras"])
            .arg(format!("DESTDIR={}", destdir.display()))
            .arg(format!("TLSSCOPE={}", support::bin().display())),
    )
}

/// `tlsscope completions SHELL`'s script.
fn script(shell: &str) -> String {
    let out = support::tlsscope(&["completions", shell]);
    assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The help of `tlsscope <path>`.
fn help(path: &[&str]) -> String {
    let mut args = path.to_vec();
    args.push("--help");
    let out = support::tlsscope(&args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The subcommands the help of `tlsscope <path>` lists, but `help` (which has no page).
fn subcommands_in_help(path: &[&str]) -> Vec<String> {
    help(path)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // A name sits two spaces in; a wrapped description further.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The long flags (`--client-work`) the help of `tlsscope <path>` lists.
fn long_flags_in_help(path: &[&str]) -> Vec<String> {
    help(path)
        .lines()
        // A flag sits at most six spaces in ("  -p, --pid", "      --matrix"); descriptions
        // are further in.
        .filter(|l| (1..=6).contains(&(l.len() - l.trim_start().len())))
        .filter_map(|l| {
            let l = l.trim_start();
            let l = match l.as_bytes() {
                [b'-', short, b',', b' ', ..] if *short != b'-' => &l[4..],
                _ => l,
            };
            l.starts_with("--").then(|| {
                l.split(|c: char| c.is_whitespace() || c == '=' || c == '[')
                    .next()
                    .unwrap()
                    .to_string()
            })
        })
        .collect()
}

/// A man page as `man -l` renders it, with groff's typographic hyphens and minus signs
/// turned back into the ASCII hyphen a user types.
fn rendered(page: &Path) -> String {
    let out = run_ok(
        Command::new("man")
            .arg("-l")
            .arg(page)
            .env("MANWIDTH", "200")
            .env("MANPAGER", "cat")
            .env("LC_ALL", "C.UTF-8"),
    );
    let err = text(&out.stderr);
    assert!(err.trim().is_empty(), "man -l {}: {err}", page.display());
    text(&out.stdout).replace(['\u{2212}', '\u{2010}'], "-")
}

/// The section `name` (OPTIONS) of a rendered page: from its heading to the next one (a line
/// that starts in the first column); empty when there is none.
fn section(page: &str, name: &str) -> String {
    page.lines()
        .skip_while(|l| *l != name)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the bash completion offers for each line of `lines` (the last word is the one being
/// completed): the completion installed under `destdir`, found by the bash-completion
/// package's own loader and run as bash runs it on a Tab.
fn bash_completes(destdir: &Path, lines: &[&[&str]]) -> Vec<Vec<String>> {
    let user_dir = destdir.join("usr/share/bash-completion");
    let mut program = String::from(
        r#"
source /usr/share/bash-completion/bash_completion || exit 3
__load_completion tlsscope || { echo "bash-completion found no tlsscope completion" >&2; exit 4; }
spec=$(complete -p tlsscope) || exit 5
fn=${spec##*-F }; fn=${fn%% *}
offer() {
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    COMPREPLY=()
    "$fn" tlsscope "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    echo "${COMPREPLY[*]}"
}
"#,
    );
    for words in lines {
        program.push_str("offer");
        for word in *words {
            program.push_str(&format!(" '{word}'"));
        }
        program.push('\n');
    }
    let out = run_ok(
        Command::new("bash")
            .args(["--norc", "--noprofile", "-c", &program])
            .env("BASH_COMPLETION_USER_DIR", &user_dir),
    );
    let offered: Vec<Vec<String>> = text(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(offered.len(), lines.len(), "{}", text(&out.stderr));
    offered
}

#[test]
fn bash_completion_completes_subcommands_flags_and_their_choices() {
    let dest = tempfile::tempdir().unwrap();
    install_extras(dest.path());
    let offered = bash_completes(
        dest.path(),
        &[
            &["tlsscope", "be"],
            &["tlsscope", "bench", "--client-w"],
            &["tlsscope", "bench", "--client-work", ""],
            &["tlsscope", ""],
        ],
    );
    assert_eq!(offered[0], ["bench"]);
    assert_eq!(offered[1], ["--client-work"]);
    assert_eq!(offered[2], ["full", "lean"]);
    // At the top level: every subcommand --help lists, and none it hides (compare-worker).
    let mut subcommands: Vec<&str> = offered[3]
        .iter()
        .map(String::as_str)
        .filter(|w| !w.starts_with('-') && *w != "help")
        .collect();
    subcommands.sort_unstable();
    let mut listed = subcommands_in_help(&[]);
    listed.sort_unstable();
    assert!(
        listed.len() >= 10,
        "too few subcommands in --help: {listed:?}"
    );
    assert_eq!(subcommands, listed);
}

#[test]
fn zsh_and_fish_completions_parse_and_fish_completes_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let zsh = dir.path().join("_tlsscope");
    std::fs::write(&zsh, script("zsh")).unwrap();
    assert!(std::fs::read_to_string(&zsh)
        .unwrap()
        .starts_with("#compdef tlsscope"));
    run_ok(Command::new("zsh").arg("-n").arg(&zsh));

    let fish = dir.path().join("tlsscope.fish");
    std::fs::write(&fish, script("fish")).unwrap();
    run_ok(Command::new("fish").arg("--no-execute").arg(&fish));
    // fish computes what a Tab would offer with `complete -C`: the candidates, each followed
    // by a tab and its description.
    let complete = |line: &str| -> Vec<String> {
        let program = format!("source '{}'; complete -C '{line}'", fish.display());
        let out = run_ok(Command::new("fish").args(["--no-config", "-c", &program]));
        text(&out.stdout)
            .lines()
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(complete("tlsscope be"), ["bench"]);
    assert_eq!(complete("tlsscope bench --client-w"), ["--client-work"]);
    assert_eq!(complete("tlsscope bench --client-work "), ["full", "lean"]);

    // Every shell's script names the subcommands and none hidden from --help.
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let s = script(shell);
        assert!(
            s.contains("bench") && s.contains("client-work"),
            "{shell}: {s}"
        );
        assert!(
            !s.contains("compare-worker"),
            "{shell} offers compare-worker"
        );
    }
}

#[test]
fn man_pages_name_every_subcommand_and_every_flag_of_each() {
    let dir = tempfile::tempdir().unwrap();
    let out = support::tlsscope(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Without --dir, tlsscope.1 goes to stdout.
    let stdout = support::tlsscope(&["man"]);
    assert!(stdout.status.success(), "{}", text(&stdout.stderr));
    assert_eq!(
        stdout.stdout,
        std::fs::read(dir.path().join("tlsscope.1")).unwrap()
    );

    // Each page, from tlsscope.1 down: it names its subcommands' pages and every long flag its
    // --help lists.
    let mut pages: Vec<Vec<String>> = vec![vec![]];
    let mut checked = 0;
    while let Some(path) = pages.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let name = std::iter::once("tlsscope")
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join("-");
        let page = rendered(&dir.path().join(format!("{name}.1")));
        let flags = long_flags_in_help(&args);
        assert!(flags.contains(&"--help".to_string()), "{name}: {flags:?}");
        let options = section(&page, "OPTIONS");
        for flag in &flags {
            assert!(
                options.contains(flag.as_str()),
                "{name}.1 lacks {flag}: {page}"
            );
        }
        let subcommands = section(&page, "SUBCOMMANDS");
        for sub in subcommands_in_help(&args) {
            let sub_page = format!("{name}-{sub}(1)");
            assert!(
                subcommands.contains(&sub_page),
                "{name}.1 lacks {sub_page}: {page}"
            );
            let mut sub_path = path.clone();
            sub_path.push(sub);
            pages.push(sub_path);
        }
        checked += 1;
    }
    assert!(checked >= 12, "only {checked} pages");
    // A flag's choices, each with its meaning.
    let bench = section(&rendered(&dir.path().join("tlsscope-bench.1")), "OPTIONS");
    let client_work = &bench[bench.find("--client-work <").expect("--client-work")..];
    assert!(client_work.contains("full: ") && client_work.contains("lean: "));
    // None for what --help hides.
    assert!(!dir.path().join("tlsscope-compare-worker.1").exists());
}

#[test]
fn unknown_shell_or_unwritable_man_dir_is_a_one_line_error() {
    let out = support::tlsscope(&["completions", "tcsh"]);
    assert_one_line_error(
        &out,
        &["tcsh", "bash", "zsh", "fish", "elvish", "powershell"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());

    let file = tempfile::NamedTempFile::new().unwrap();
    let path = file.path().to_str().unwrap();
    let out = support::tlsscope(&["man", "--dir", path]);
    assert_one_line_error(&out, &["--dir", path, "not a directory"]);
}

#[test]
fn install_extras_puts_completions_and_man_pages_where_the_shells_and_man_look() {
    let dest = tempfile::tempdir().unwrap();
    install_extras(dest.path());
    let d = dest.path();
    for (file, shell) in [
        ("usr/share/bash-completion/completions/tlsscope", "bash"),
        ("usr/share/zsh/vendor-completions/_tlsscope", "zsh"),
        ("usr/share/fish/vendor_completions.d/tlsscope.fish", "fish"),
    ] {
        let installed =
            std::fs::read_to_string(d.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(installed, script(shell), "{file}");
    }
    let man_dir = d.join("usr/local/share/man");
    for sub in subcommands_in_help(&[]) {
        // man finds the page by name in that tree, as it will in /usr/local/share/man.
        let out = run_ok(
            Command::new("man")
                .arg("-M")
                .arg(&man_dir)
                .args(["-w", &format!("tlsscope-{sub}")]),
        );
        let found = PathBuf::from(text(&out.stdout).trim());
        assert_eq!(found, man_dir.join(format!("man1/tlsscope-{sub}.1")));
    }
    assert!(man_dir.join("man1/tlsscope.1").is_file());
}

#[test]
fn make_build_installs_the_completions_and_man_pages() {
    // A dry run: what `make build` (the README's setup, through `make lab`) would do.
    let out = run_ok(
        Command::new("make")
            .current_dir(workspace_root())
            .args(["--no-print-directory", "-n", "build"])
            // The Makefile's defaults, not the test environment's (cargo sets CARGO).
            .env_remove("CARGO")
            .env_remove("PREFIX")
            .env_remove("DESTDIR")
            .env_remove("TLSSCOPE"),
    );
    let steps = text(&out.stdout);
    for step in [
        "cargo build --release",
        "target/release/tlsscope completions bash > /usr/share/bash-completion/completions/tlsscope",
        "target/release/tlsscope completions zsh > /usr/share/zsh/vendor-completions/_tlsscope",
        "target/release/tlsscope completions fish > /usr/share/fish/vendor_completions.d/tlsscope.fish",
        "target/release/tlsscope man --dir /usr/local/share/man/man1",
        "mandb -q",
    ] {
        assert!(steps.contains(step), "make -n build lacks {step:?}: {steps}");
    }
}
