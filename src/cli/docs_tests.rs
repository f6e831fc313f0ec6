//! Every `hvtrain …` command line the book (`docs/`) and README show is one this command line
//! parses: a renamed flag or subcommand fails here, not for the user who copies the line.
//!
//! Must not: run the commands (parsing only) or read anything but the Markdown files.

use super::Cli;
use clap::error::ErrorKind;
use clap::Parser;
use std::path::{Path, PathBuf};

/// The Markdown files users read: README.md and every file of the book.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("README.md")];
    let mut book: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ (the book)")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    book.sort();
    out.extend(book);
    out
}

/// A line's words as a POSIX shell splits them: quotes and backslashes, up to a comment or an
/// operator (`|`, `;`, `&&`, `||`, `>`, `<`, `&`), which end the command.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let (mut cur, mut any) = (String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                any = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    cur.push(c);
                }
            }
            '"' => {
                any = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => cur.extend(chars.next()),
                        c => cur.push(c),
                    }
                }
            }
            '\\' => {
                any = true;
                cur.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if any {
                    words.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            '#' if !any => break,
            '|' | ';' | '&' | '>' | '<' if !any => break,
            c => {
                any = true;
                cur.push(c);
            }
        }
    }
    if any {
        words.push(cur);
    }
    words
}

/// The hvtrain invocation in a command line's words: from the `hvtrain` word (or a path ending
/// in `/hvtrain`) on, when the line starts as a command does (hvtrain itself, a launcher,
/// `VAR=value` settings, a `$ ` prompt); None for output lines (`hvtrain: error ...`).
fn invocation(words: &[String]) -> Option<Vec<String>> {
    let is_hvtrain = |w: &str| w == "hvtrain" || w.ends_with("/hvtrain");
    let mut i = 0;
    while i < words.len() && (words[i] == "$" || (words[i].contains('=') && !words[i].starts_with('-'))) {
        i += 1;
    }
    let first = words.get(i)?;
    let launchers = ["mpirun", "mpiexec", "mpirun.mpich", "srun", "timeout", "env", "time", "nohup"];
    if !is_hvtrain(first) && !launchers.contains(&first.as_str()) {
        return None;
    }
    let at = words[i..].iter().position(|w| is_hvtrain(w))? + i;
    let args = &words[at..];
    if args.get(1).is_some_and(|w| w.ends_with(':')) {
        return None;
    }
    // A shell variable's value is unknown here: "0" is a number, a name and a path alike.
    Some(args.iter().map(|w| if w.starts_with('$') { "0".to_string() } else { w.clone() }).collect())
}

/// Every command line in `text`'s shell and untagged code blocks (continuation lines joined),
/// and every inline code span that is a whole `hvtrain` command, with its line number.
fn commands(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if let Some(rest) = line.trim_start().strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(rest.trim().to_string()),
            };
            continue;
        }
        match &fence {
            Some(tag) if tag.is_empty() || ["sh", "bash", "console", "shell"].contains(&tag.as_str()) => {
                let (start, mut joined) = pending.take().unwrap_or((n, String::new()));
                match line.trim_end().strip_suffix('\\') {
                    Some(head) => {
                        joined.push_str(head);
                        joined.push(' ');
                        pending = Some((start, joined));
                    }
                    None => {
                        joined.push_str(line);
                        out.push((start, joined));
                    }
                }
            }
            Some(_) => {}
            None => {
                for span in line.split('`').skip(1).step_by(2) {
                    // A command line, not the name of a command (`hvtrain eval`): it has a
                    // flag, a file or a setting, and no placeholder of prose (`<command>`, `…`).
                    let whole = !span.contains(['<', '…', '[', '|']) && !span.contains("...");
                    let args = span.split_whitespace().any(|w| w.starts_with('-') || w.contains(['.', '/', '=']));
                    if span.starts_with("hvtrain ") && whole && args {
                        out.push((n, span.to_string()));
                    }
                }
            }
        }
    }
    out
}

/// Command lines the pages show on purpose as wrong (the error catalogue's examples): each
/// must stay wrong.
const SHOWN_WRONG: [&str; 1] = ["hvtrain train job.toml --bogus"];

#[test]
fn every_hvtrain_command_in_the_book_and_readme_parses() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, cmd) in commands(&text) {
            let Some(args) = invocation(&shell_words(&cmd)) else { continue };
            checked += 1;
            if SHOWN_WRONG.contains(&args.join(" ").as_str()) {
                assert!(Cli::try_parse_from(&args).is_err(), "{}:{line}: shown as wrong, but parses", page.display());
                continue;
            }
            if let Err(e) = Cli::try_parse_from(&args) {
                if !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                    let first = e.to_string().lines().next().unwrap_or_default().to_string();
                    bad.push(format!("{}:{line}: {}\n    {first}", page.display(), args.join(" ")));
                }
            }
        }
    }
    // The pages show dozens of commands; finding few means the reader above is broken.
    assert!(checked >= 40, "only {checked} hvtrain command lines found in README.md and docs/");
    assert!(bad.is_empty(), "command lines the CLI does not parse:\n{}", bad.join("\n"));
}

#[test]
fn the_reader_finds_commands_and_the_parser_refuses_a_renamed_flag() {
    let md = "Run `hvtrain data check d.h5` or `hvtrain <command> --help`.\n\n```sh\n\
OMPI_X=1 mpirun -n 2 --oversubscribe target/release/hvtrain train j.toml \\\n    --set 'output.dir=\"r\"'  # a comment\n\
hvtrain plot runs/a | tee log\n```\n\n```\nhvtrain: error on rank 1: bad\n[INFO] hvtrain 0.1 starting\n```\n";
    let found: Vec<Vec<String>> = commands(md).into_iter().filter_map(|(_, c)| invocation(&shell_words(&c))).collect();
    let want = [
        "hvtrain data check d.h5",
        "target/release/hvtrain train j.toml --set output.dir=\"r\"",
        "hvtrain plot runs/a",
    ];
    assert_eq!(found.iter().map(|a| a.join(" ")).collect::<Vec<_>>(), want);
    assert!(Cli::try_parse_from(["hvtrain", "train", "j.toml", "--set", "a.b=1"]).is_ok());
    assert!(Cli::try_parse_from(["hvtrain", "train", "j.toml", "--sett", "a.b=1"]).is_err());
    assert!(Cli::try_parse_from(["hvtrain", "trian", "j.toml"]).is_err());
}
