//! The book (`docs/`, mdBook) and README hold together: every relative link points at a file
//! that exists, every `#anchor` at a heading of its page (ids as mdBook and GitHub make them),
//! every page of the book is in `SUMMARY.md` and every entry of `SUMMARY.md` is a page. (That
//! every `hvtrain` command line shown parses: `src/cli/docs_tests.rs`; that the book builds:
//! `make docs`, which `make test` runs.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn book_pages() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    v.sort();
    v
}

/// `text` without its fenced code blocks (blanked, so line numbers stay) and inline code spans.
fn prose(text: &str) -> Vec<String> {
    let mut fence = false;
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("```") {
                fence = !fence;
                return String::new();
            }
            if fence {
                return String::new();
            }
            l.split('`').step_by(2).collect::<Vec<_>>().join("")
        })
        .collect()
}

/// The id mdBook (and GitHub) gives a heading: its text without markup, lower case, spaces as
/// `-`, only letters, digits, `-` and `_` kept.
fn heading_id(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // [text](url) -> text
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The ids of a page's headings (duplicates get -1, -2, … as mdBook numbers them).
fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap_or_default();
    let mut fence = false;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        let hashes = l.chars().take_while(|&c| c == '#').count();
        if fence || hashes == 0 || hashes > 6 || !l[hashes..].starts_with(' ') {
            continue;
        }
        let id = heading_id(&l[hashes..].replace('`', ""));
        let n = seen.entry(id.clone()).or_default();
        out.insert(if *n == 0 { id.clone() } else { format!("{id}-{n}") });
        *n += 1;
    }
    out
}

/// Every `[text](target)` link in a line's prose.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        out.push(after[..end].split_whitespace().next().unwrap_or("").to_string());
        rest = &after[end.min(after.len())..];
    }
    out
}

/// What is wrong with the relative links of `page`: a missing file, or an anchor no heading has.
fn broken_links(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let dir = page.parent().unwrap();
    let mut bad = Vec::new();
    for (n, line) in prose(&text).iter().enumerate() {
        for link in links(line) {
            if link.is_empty() || link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match link.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() { page.to_path_buf() } else { dir.join(path) };
            let at = format!("{}:{}: {link}", page.strip_prefix(ROOT).unwrap_or(page).display(), n + 1);
            if !target.exists() {
                bad.push(format!("{at}: no such file"));
            } else if let Some(a) = anchor {
                if target.extension().is_some_and(|e| e == "md") && !anchors(&target).contains(a) {
                    bad.push(format!("{at}: no heading with this id in {}", target.display()));
                }
            }
        }
    }
    bad
}

#[test]
fn every_link_and_anchor_in_the_book_and_readme_resolves() {
    let mut pages = book_pages();
    pages.push(Path::new(ROOT).join("README.md"));
    pages.push(Path::new(ROOT).join("ARCHITECTURE.md"));
    let bad: Vec<String> = pages.iter().flat_map(|p| broken_links(p)).collect();
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary_and_every_entry_is_a_page() {
    let docs = Path::new(ROOT).join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).expect("docs/SUMMARY.md");
    let listed: BTreeSet<String> = prose(&summary).iter().flat_map(|l| links(l)).filter(|l| !l.is_empty()).collect();
    let pages: BTreeSet<String> = book_pages()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "SUMMARY.md")
        .collect();
    let missing: Vec<_> = pages.difference(&listed).collect();
    let absent: Vec<_> = listed.difference(&pages).collect();
    assert!(missing.is_empty(), "pages of docs/ not in SUMMARY.md (mdBook would not build them): {missing:?}");
    assert!(absent.is_empty(), "SUMMARY.md entries with no page: {absent:?}");
}

#[test]
fn the_checks_see_a_broken_link_and_a_missing_anchor() {
    let dir = std::env::temp_dir().join(format!("hvtrain-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("a.md");
    std::fs::write(dir.join("b.md"), "# The `[data]` table: keys\n\n## Same\n\n## Same\n").unwrap();
    std::fs::write(
        &page,
        "[ok](b.md#the-data-table-keys) [ok](b.md#same-1) [bad](c.md) [bad](b.md#nope)\n\
`[not a link](x.md)`\n```\n[in code](y.md)\n```\n",
    )
    .unwrap();
    let bad = broken_links(&page);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].contains("c.md: no such file") && bad[1].contains("b.md#nope: no heading"), "{bad:?}");
}
