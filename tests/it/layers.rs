//! The layer rule, read from the code: every `crate::` path in `src/` names a module of a
//! lower layer than the file's own (the order is the numbered list under "## Layers" at the
//! top of ARCHITECTURE.md, so the document and the check cannot drift apart), and inside a
//! folder no two files import each other, directly or around a cycle. Reads text only; runs
//! no MPI and builds nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The layers, lowest first: each a set of top-level module names.
fn layers() -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap();
    let section = text.split("\n## Layers").nth(1).expect("ARCHITECTURE.md has a '## Layers' section");
    let section = section.split("\n## ").next().unwrap();
    let mut out = Vec::new();
    for line in section.lines() {
        let t = line.trim_start();
        let Some((num, rest)) = t.split_once(". ") else { continue };
        if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        // The names are the backticked words before the first colon.
        let names = rest.split(':').next().unwrap();
        let mods: Vec<String> = names.split('`').skip(1).step_by(2).map(|s| s.to_string()).collect();
        assert!(!mods.is_empty(), "a layer line without a `module`: {line}");
        out.push(mods);
    }
    assert!(out.len() > 5, "the '## Layers' list has {} entries", out.len());
    out
}

/// Every `.rs` file under src/ but the generator of the ONNX bindings (its own crate).
fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if !p.ends_with("export/proto") {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut v = Vec::new();
    walk(&Path::new(ROOT).join("src"), &mut v);
    v.sort();
    v
}

/// The module path of a source file: src/train/ps/worker.rs -> [train, ps, worker];
/// src/config/mod.rs -> [config]; src/main.rs -> [].
fn module_path(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(Path::new(ROOT).join("src")).unwrap();
    let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    match last.as_str() {
        "mod.rs" | "main.rs" => {}
        f => parts.push(f.trim_end_matches(".rs").to_string()),
    }
    parts
}

/// The code of a file without comments (line comments and doc comments).
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n")
}

fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// Every path the code names from `prefix` (`crate::`, `super::`...), as segments; a
/// `{a, b::c}` group gives one path per member.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        if i > 0 && code[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // part of a longer path (super::super:: is handled by the caller)
        }
        let mut rest = &code[i + prefix.len()..];
        let mut segs = Vec::new();
        loop {
            if let Some(group) = rest.strip_prefix('{') {
                let inner = &group[..group.find('}').unwrap_or(group.len())];
                for member in inner.split(',') {
                    let mut p = segs.clone();
                    for s in member.trim().split("::") {
                        let id = ident(s.trim());
                        if !id.is_empty() {
                            p.push(id.to_string());
                        }
                    }
                    out.push(p);
                }
                break;
            }
            let id = ident(rest);
            if id.is_empty() {
                out.push(segs);
                break;
            }
            segs.push(id.to_string());
            rest = &rest[id.len()..];
            match rest.strip_prefix("::") {
                Some(r) => rest = r,
                None => {
                    out.push(segs);
                    break;
                }
            }
        }
    }
    out
}

/// The module paths that exist (files and folders), to tell a module from an item.
fn modules(files: &[PathBuf]) -> BTreeSet<Vec<String>> {
    let mut m = BTreeSet::new();
    for f in files {
        let p = module_path(f);
        for k in 0..=p.len() {
            m.insert(p[..k].to_vec());
        }
    }
    m
}

/// The longest module prefix of `path` that is a module.
fn resolve(mods: &BTreeSet<Vec<String>>, path: Vec<String>) -> Vec<String> {
    let mut p = path;
    while !mods.contains(&p) {
        p.pop();
    }
    p
}

/// Every reference of every file, resolved to a module path: (file's module, target module).
fn references(files: &[PathBuf]) -> Vec<(Vec<String>, Vec<String>, String)> {
    let mods = modules(files);
    let mut out = Vec::new();
    for f in files {
        let me = module_path(f);
        let text = code(f);
        // An inline module (`mod tests { use super::*; }`) is one level deeper: its super::
        // is the file's own module. Inline modules come last in our files.
        let inline = text.match_indices("mod ").find(|&(i, _)| {
            let rest = &text[i + 4..];
            let name = ident(rest);
            !name.is_empty() && rest[name.len()..].trim_start().starts_with('{')
        });
        let (outer, inner) = text.split_at(inline.map_or(text.len(), |(i, _)| i));
        let mut targets: Vec<Vec<String>> = paths_after(&text, "crate::");
        for (part, depth) in [(outer, 0), (inner, 1)] {
            for p in paths_after(part, "super::") {
                // super:: is the parent module (of a file, or of a folder's mod.rs: the folder's
                // parent); a chain super::super:: climbs more.
                let mut base = me.clone();
                let mut p = p;
                if depth == 0 {
                    base.pop();
                }
                while p.first().is_some_and(|s| s == "super") {
                    p.remove(0);
                    base.pop();
                }
                base.extend(p);
                targets.push(base);
            }
            for p in paths_after(part, "self::") {
                let mut base = me.clone();
                base.extend(p);
                targets.push(base);
            }
        }
        let rel = f.strip_prefix(ROOT).unwrap().display().to_string();
        for t in targets {
            out.push((me.clone(), resolve(&mods, t), rel.clone()));
        }
    }
    out
}

#[test]
fn every_crate_import_goes_down_the_layers() {
    let layers = layers();
    let mut level = BTreeMap::new();
    for (i, l) in layers.iter().enumerate() {
        for m in l {
            assert!(level.insert(m.clone(), i).is_none(), "`{m}` is in two layers");
        }
    }
    let files = sources();
    let mut missing = BTreeSet::new();
    let mut up = Vec::new();
    for (me, target, file) in references(&files) {
        let (Some(a), Some(b)) = (me.first(), target.first()) else {
            if me.is_empty() {
                continue; // main.rs: the top, may use anything
            }
            up.push(format!("{file}: names an item of main.rs (crate::<item>), the top layer"));
            continue;
        };
        if a == b {
            continue;
        }
        for m in [a, b] {
            if !level.contains_key(m) {
                missing.insert(m.clone());
            }
        }
        if let (Some(&la), Some(&lb)) = (level.get(a), level.get(b)) {
            if lb >= la {
                up.push(format!("{file}: `{a}` (layer {}) uses `{b}` (layer {})", la + 1, lb + 1));
            }
        }
    }
    for f in &files {
        if let Some(top) = module_path(f).first() {
            if !level.contains_key(top) {
                missing.insert(top.clone());
            }
        }
    }
    assert!(missing.is_empty(), "modules missing from ARCHITECTURE.md's '## Layers' list: {missing:?}");
    up.sort();
    up.dedup();
    assert!(up.is_empty(), "imports that do not go down the layers:\n  {}", up.join("\n  "));
}

#[test]
fn no_two_files_of_a_folder_import_each_other() {
    let files = sources();
    // For each folder, the edges between its children (a child is a file or a subfolder).
    let mut edges: BTreeMap<Vec<String>, BTreeSet<(String, String)>> = BTreeMap::new();
    for (me, target, _) in references(&files) {
        let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
        // A folder's own module (mod.rs) and its children may use each other; siblings may not.
        if common >= me.len() || common >= target.len() {
            continue;
        }
        let folder = me[..common].to_vec();
        edges.entry(folder).or_default().insert((me[common].clone(), target[common].clone()));
    }
    let mut cycles = Vec::new();
    for (folder, e) in &edges {
        // Repeatedly remove children that import no remaining sibling; what is left is cycles.
        let mut left: BTreeSet<&String> = e.iter().flat_map(|(a, b)| [a, b]).collect();
        loop {
            let leaf = left.iter().copied().find(|n| !e.iter().any(|(a, b)| a == *n && left.contains(b) && a != b));
            match leaf {
                Some(n) => {
                    left.remove(n);
                }
                None => break,
            }
        }
        if !left.is_empty() {
            let pairs: Vec<String> = e
                .iter()
                .filter(|(a, b)| left.contains(a) && left.contains(b))
                .map(|(a, b)| format!("{a} -> {b}"))
                .collect();
            cycles.push(format!("src/{}: {}", folder.join("/"), pairs.join(", ")));
        }
    }
    assert!(cycles.is_empty(), "files of one folder that import each other:\n  {}", cycles.join("\n  "));
}

/// The checks themselves see what they claim: an upward path and a cycle planted in text.
#[test]
fn the_reader_finds_paths_groups_and_super_chains() {
    let p = paths_after("use crate::{a::B, c};\nlet x = crate::d::e(); use super::super::f::G;", "crate::");
    assert_eq!(p, [vec!["a", "B"], vec!["c"], vec!["d", "e"]]);
    let p = paths_after("use super::super::f::G; use super::{h, i::J};", "super::");
    assert_eq!(p, [vec!["super", "f", "G"], vec!["h"], vec!["i", "J"]]);
    let layers = layers();
    assert_eq!(layers.first().map(|l| l[0].as_str()), Some("error"));
    assert_eq!(layers.last().map(|l| l[0].as_str()), Some("main"));
}

/// Every module opens with a comment that says what it owns and what it must not do, and
/// ARCHITECTURE.md's code map has a row for every source file.
#[test]
fn every_file_says_what_it_owns_and_must_not_do_and_is_in_the_code_map() {
    let arch = std::fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap();
    let map = arch.split("\n## Code map").nth(1).expect("a '## Code map' section");
    let map = map.split("\n## ").next().unwrap();
    let mut bad = Vec::new();
    for f in sources() {
        let rel = f.strip_prefix(ROOT).unwrap().display().to_string();
        let text = std::fs::read_to_string(&f).unwrap();
        if text.starts_with("// @generated") {
            continue;
        }
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with("//!")).collect();
        if header.is_empty() {
            bad.push(format!("{rel}: no //! header"));
        } else if !header.iter().any(|l| l.contains("Must not")) {
            bad.push(format!("{rel}: the header does not say what the module must not do (\"Must not: ...\")"));
        }
        if !map.contains(&format!("`{rel}`")) {
            bad.push(format!("{rel}: no row in ARCHITECTURE.md's code map"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
