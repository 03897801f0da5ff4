//! Every path that README.md, the documents under `docs/` and the comments of
//! the Rust sources (`src/`, `benches/`, `tests/`) name is a file or folder of
//! this repository, and none of them points outside it.
//!
//! What counts as a path:
//! - a word with a slash whose first part is a top-level entry of the
//!   repository (`src/app.rs`, `tests/support/`, `deploy/namespaced`), read
//!   from the root;
//! - a word with a slash that names a Rust or Markdown file
//!   (`reconcile/write/child.rs`), or that ends in a slash and starts with a folder
//!   of `src/` (`webhook/`), read from the naming file's folder, from the root
//!   or from `src/`;
//! - a bare Rust or Markdown file name (`limits.md`), which some file of the
//!   repository must carry;
//! - a Markdown link target, read from the Markdown file's folder;
//! - any path that starts with `./` or `../`, read from the naming file's
//!   folder: one that leaves the repository is an error, whether it exists or
//!   not.
//!
//! A code span that reads as a module path of the crate (`state::files`,
//! `crate::webhook::review::decode`) must name modules of `src/` down to a
//! part that the last module's file names (an item or a re-export).
//!
//! Not paths: URLs, absolute paths (the API server's `/apis/...`, `/proc`),
//! paths in the home folder, and words such as `apps/v1` or
//! `infergate.dev/track` whose first part is no entry of the repository.
//! `<placeholder>` parts and `*` match any name; a part with `...` ends the
//! path there. Places the build or the fuzzer create (`target/`, the fuzzer's
//! artifacts) are allowed by name in `GENERATED`.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// Places the build or a tool creates, named in the docs but never committed.
const GENERATED: &[&str] = &["target", "fuzz/target", "fuzz/artifacts", ".dev"];

/// Extensions that make a word without a top-level first part a file name of
/// this repository. Other names (`config.yaml`, `crd/*.yaml`) are as often a
/// ConfigMap's key, a file the user writes or one in a downloaded release.
const EXTENSIONS: &[&str] = &["rs", "md"];

/// Words that read like repository paths but are not: kubectl's `TYPE/NAME`.
const NOT_PATHS: &[&str] = &["deploy/infergate"];

/// Top-level names that are read from the root even when the folder is gone.
const TOP_LEVEL: &[&str] = &[
    "src", "docs", "tests", "benches", "examples", "crds", "deploy", "charts", "fuzz", "hack",
    "proto", "certs", "webhooks", ".ci",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A piece of prose: the file it is in (relative to the root), its line, and
/// whether it is Markdown (link targets are read only there).
struct Prose {
    file: PathBuf,
    line: usize,
    text: String,
    markdown: bool,
}

fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// The comments of a Rust source, line by line: `//` comments (`///`, `//!`
/// included) and `/* */` blocks, skipping string and character literals.
fn rust_comments(text: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let push = |out: &mut Vec<(usize, String)>, line: usize, c: char| match out.last_mut() {
        Some((l, s)) if *l == line => s.push(c),
        _ => out.push((line, c.to_string())),
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && next == Some('/') {
            i += 2;
            push(&mut out, line, ' ');
            while i < chars.len() && chars[i] != '\n' {
                push(&mut out, line, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            let mut depth = 1;
            while i < chars.len() && depth > 0 {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    } else {
                        push(&mut out, line, chars[i]);
                    }
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            // A raw string: r"...", r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('\n') => line += 1,
                    Some('"') if (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    _ => {}
                }
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

fn prose() -> Vec<Prose> {
    let root = root();
    let mut out = Vec::new();
    let mut markdown = vec![root.join("README.md")];
    let mut docs = Vec::new();
    walk(&root.join("docs"), "md", &mut docs);
    markdown.extend(docs);
    for path in markdown {
        let text = std::fs::read_to_string(&path).expect("read");
        let file = path.strip_prefix(&root).expect("under root").to_path_buf();
        for (n, l) in text.lines().enumerate() {
            out.push(Prose {
                file: file.clone(),
                line: n + 1,
                text: l.to_string(),
                markdown: true,
            });
        }
    }
    for dir in ["src", "benches", "tests"] {
        let mut sources = Vec::new();
        walk(&root.join(dir), "rs", &mut sources);
        for path in sources {
            let text = std::fs::read_to_string(&path).expect("read");
            let file = path.strip_prefix(&root).expect("under root").to_path_buf();
            for (line, text) in rust_comments(&text) {
                out.push(Prose {
                    file: file.clone(),
                    line,
                    text,
                    markdown: false,
                });
            }
        }
    }
    assert!(out.len() > 1000, "too little prose found: {}", out.len());
    out
}

/// Characters a path is made of.
fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '*' | '<' | '>' | '~')
}

/// The words of a line that may be paths, with their leading character (to
/// tell `://` and a word inside another).
fn words(text: &str) -> Vec<(Option<char>, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut before = None;
    let mut last = None;
    for c in text.chars() {
        if path_char(c) {
            if current.is_empty() {
                before = last;
            }
            current.push(c);
        } else if !current.is_empty() {
            out.push((before, std::mem::take(&mut current)));
        }
        last = Some(c);
    }
    if !current.is_empty() {
        out.push((before, current));
    }
    out
}

/// Markdown link targets (`[text](target)`) of a line, outside code spans.
fn link_targets(text: &str) -> Vec<String> {
    let prose: String = text
        .split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, part)| part)
        .collect::<Vec<_>>()
        .join(" ");
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].to_string());
        rest = &after[end..];
    }
    out
}

fn has_extension(word: &str) -> bool {
    let name = word.rsplit('/').next().unwrap_or(word);
    name.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.is_empty() && EXTENSIONS.contains(&ext) && !stem.ends_with('.')
    })
}

/// Joins `path` onto `base` lexically; `None` when it climbs above `base`'s
/// root (the repository).
fn join_inside(base: &Path, path: &str) -> Option<PathBuf> {
    let mut out: Vec<String> = base
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for part in Path::new(path).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop()?;
            }
            Component::Normal(p) => out.push(p.to_string_lossy().into_owned()),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out.iter().collect())
}

/// Whether `rel` (relative to the root, `*` and `<..>` parts matching any
/// name) names something in the repository.
fn exists(rel: &Path) -> bool {
    let root = root();
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let joined = parts.join("/");
    if GENERATED
        .iter()
        .any(|g| joined == *g || joined.starts_with(&format!("{g}/")))
    {
        return true;
    }
    let mut here = vec![root];
    for part in &parts {
        if part.contains("...") {
            return !here.is_empty();
        }
        let mut next = Vec::new();
        for dir in &here {
            if part.contains('*') || part.contains('<') {
                let Ok(entries) = std::fs::read_dir(dir) else {
                    continue;
                };
                for entry in entries {
                    let path = entry.expect("entry").path();
                    let name = path
                        .file_name()
                        .expect("name")
                        .to_string_lossy()
                        .into_owned();
                    if matches_pattern(part, &name) {
                        next.push(path);
                    }
                }
            } else if dir.join(part).exists() {
                next.push(dir.join(part));
            }
        }
        here = next;
        if here.is_empty() {
            return false;
        }
    }
    true
}

/// `*` and `<anything>` match any run of characters.
fn matches_pattern(pattern: &str, name: &str) -> bool {
    let mut literal = Vec::new();
    let mut current = String::new();
    let mut in_angle = false;
    for c in pattern.chars() {
        match c {
            '<' => {
                in_angle = true;
                literal.push(std::mem::take(&mut current));
            }
            '>' if in_angle => in_angle = false,
            '*' if !in_angle => literal.push(std::mem::take(&mut current)),
            _ if !in_angle => current.push(c),
            _ => {}
        }
    }
    literal.push(current);
    let mut rest = name;
    for (i, lit) in literal.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(lit.as_str()) else {
                return false;
            };
            rest = r;
        } else if i == literal.len() - 1 {
            return rest.ends_with(lit.as_str());
        } else {
            let Some(at) = rest.find(lit.as_str()) else {
                return false;
            };
            rest = &rest[at + lit.len()..];
        }
    }
    rest.is_empty()
}

/// Every file name in the repository (for bare names such as `limits.md`).
fn file_names() -> BTreeSet<String> {
    fn names(dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let name = path.file_name().expect("name").to_string_lossy();
            if name == "target" || name == ".git" {
                continue;
            }
            out.insert(name.into_owned());
            if path.is_dir() {
                names(&path, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    names(&root(), &mut out);
    out
}

/// What is wrong with `word` as named in `file`, if it is a path at all.
fn check_word(
    file: &Path,
    before: Option<char>,
    word: &str,
    names: &BTreeSet<String>,
) -> Option<String> {
    let word = word.trim_end_matches(['.', ',', ':', ';']);
    let word = word.trim_start_matches(['<', '>']);
    if word.is_empty()
        || word.starts_with('/')
        || word.starts_with('~')
        || before == Some(':')
        || NOT_PATHS.contains(&word)
    {
        return None;
    }
    let dir = file.parent().unwrap_or(Path::new(""));
    if word.starts_with("./") || word.starts_with("../") || word == ".." {
        return match join_inside(dir, word) {
            None => Some(format!("`{word}` is outside the repository")),
            Some(p) if !exists(&p) => Some(format!("`{word}` ({}) does not exist", p.display())),
            Some(_) => None,
        };
    }
    let first = word.split('/').next().unwrap_or("");
    if word.contains('/') {
        let top = TOP_LEVEL.contains(&first) || (!first.is_empty() && root().join(first).is_file());
        if top {
            return (!exists(Path::new(word))).then(|| format!("`{word}` does not exist"));
        }
        let src_dir = !first.is_empty() && root().join("src").join(first).is_dir();
        if has_extension(word) || (word.ends_with('/') && src_dir) {
            let found = [dir, Path::new(""), Path::new("src")]
                .iter()
                .any(|base| join_inside(base, word).is_some_and(|p| exists(&p)));
            return (!found).then(|| format!("`{word}` does not exist"));
        }
        return None;
    }
    if has_extension(word) && !word.contains(['*', '<']) && !names.contains(word) {
        return Some(format!("`{word}` is no file of the repository"));
    }
    None
}

fn check_link(file: &Path, target: &str) -> Option<String> {
    let target = target.split_whitespace().next().unwrap_or("");
    let path = target.split('#').next().unwrap_or("");
    if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
        return None;
    }
    if path.starts_with('/') {
        return Some(format!("link `{target}` is absolute"));
    }
    let dir = file.parent().unwrap_or(Path::new(""));
    match join_inside(dir, path) {
        None => Some(format!("link `{target}` leaves the repository")),
        Some(p) if !exists(&p) => Some(format!("link `{target}` ({}) does not exist", p.display())),
        Some(_) => None,
    }
}

fn problems() -> Vec<String> {
    let names = file_names();
    let mut out = Vec::new();
    for p in prose() {
        let mut found = BTreeSet::new();
        if p.markdown {
            for target in link_targets(&p.text) {
                found.extend(check_link(&p.file, &target));
            }
        }
        for (before, word) in words(&p.text) {
            found.extend(check_word(&p.file, before, &word, &names));
        }
        for f in found {
            out.push(format!("{}:{}: {f}", p.file.display(), p.line));
        }
    }
    out
}

/// Code spans (`` `...` ``) of a line.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The file of module `parts` (`["a", "b"]`): `src/<a>/<b>.rs` or
/// `src/<a>/<b>/mod.rs`.
fn module_file(parts: &[&str]) -> Option<PathBuf> {
    let base = root().join("src").join(parts.join("/"));
    [base.with_extension("rs"), base.join("mod.rs")]
        .into_iter()
        .find(|f| f.is_file())
}

/// Whether `word` occurs in `text` as a whole identifier.
fn has_ident(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

/// What is wrong with a module path such as `webhook::review::decode`, if its
/// first part is a module of the crate: each part is a module below the
/// previous one, until one that the last module's file names (an item, a
/// re-export or an inline module; what follows it is not checked).
fn check_module_path(span: &str) -> Option<String> {
    let path = span.strip_prefix("crate::").unwrap_or(span);
    let parts: Vec<&str> = path.split("::").collect();
    let ident = |p: &&str| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_');
    if parts.len() < 2 || !parts.iter().all(ident) || matches!(parts[0], "main" | "lib") {
        return None;
    }
    module_file(&parts[..1])?;
    for i in 1..parts.len() {
        if module_file(&parts[..=i]).is_some() {
            continue;
        }
        let file = module_file(&parts[..i]).expect("checked on the way down");
        let text = std::fs::read_to_string(&file).expect("read");
        if has_ident(&text, parts[i]) {
            return None;
        }
        return Some(format!(
            "`{span}`: `{}` is no module or item of `{}`",
            parts[i],
            parts[..i].join("::")
        ));
    }
    None
}

fn module_problems() -> Vec<String> {
    let mut out = Vec::new();
    for p in prose() {
        let found: BTreeSet<String> = code_spans(&p.text)
            .into_iter()
            .filter_map(check_module_path)
            .collect();
        for f in found {
            out.push(format!("{}:{}: {f}", p.file.display(), p.line));
        }
    }
    out
}

#[test]
fn every_module_path_the_docs_and_comments_name_exists() {
    let problems = module_problems();
    assert!(
        problems.is_empty(),
        "{} module path(s) named in README.md, docs/ or comments are not in the crate:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_path_the_docs_and_comments_name_exists() {
    let problems = problems();
    assert!(
        problems.is_empty(),
        "{} path(s) named in README.md, docs/ or comments do not exist in the repository:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_recogniser_tells_paths_from_other_words() {
    let names = file_names();
    let file = Path::new("docs/example.md");
    let bad = |w: &str| check_word(file, None, w, &names).is_some();
    // Repository paths, existing or not.
    assert!(!bad("src/app.rs"));
    assert!(!bad("tests/support/"));
    assert!(!bad("webhooks/*.yaml"));
    assert!(!bad("fuzz/corpus/<target>/"));
    assert!(!bad("fuzz/artifacts/<target>/crash-..."));
    assert!(!bad("limits.md"));
    assert!(!bad("../README.md"));
    assert!(bad("src/no_such_file.rs"));
    assert!(bad("docs/no-such.md"));
    assert!(bad("NO-SUCH-CONTRACT.md"));
    // Outside the repository: wrong even where a file exists.
    assert!(bad("../../README.md"));
    assert!(bad("../../somewhere/else"));
    // Not repository paths.
    assert!(!bad("/apis/infergate.dev/v1beta1/inferenceservices"));
    assert!(!bad("/proc/self/stat"));
    assert!(!bad("~/.cache/infergate/"));
    assert!(!bad("apps/v1"));
    assert!(!bad("infergate.dev/applied-digest"));
    assert!(!bad("1.36.3"));
    assert!(!bad("deploy/infergate"));
    assert!(!bad("config.yaml"));
    assert!(check_word(file, Some(':'), "//example.com/x.md", &names).is_none());
    // Links are read from the Markdown file's folder.
    assert!(check_link(file, "limits.md#budget").is_none());
    assert!(check_link(file, "https://example.com/x.md").is_none());
    assert!(check_link(file, "x/no-such.md").is_some());
    assert!(check_link(file, "../../x.md").is_some());
    assert!(link_targets("`[a-z]([-a-z]*)?` and [b](limits.md)") == ["limits.md"]);
}

#[test]
fn module_paths_are_read_down_the_crate() {
    assert!(check_module_path("webhook::review::decode").is_none());
    assert!(check_module_path("crate::state::files").is_none());
    assert!(check_module_path("serde_json::Value").is_none());
    assert!(check_module_path("webhook::no_such_module").is_some());
    assert!(check_module_path("engine::no_such_item::Thing").is_some());
}

#[test]
fn comments_are_read_outside_string_literals_only() {
    let text = "let a = \"src/no_such.rs // not a comment\"; // src/app.rs\n\
                let b = r#\"docs/x.md\"#; let c = '\"'; /* tests/ */\n";
    let comments = rust_comments(text);
    assert_eq!(comments.len(), 2, "{comments:?}");
    assert_eq!(comments[0].0, 1);
    assert!(comments[0].1.contains("src/app.rs"));
    assert!(!comments[0].1.contains("no_such"));
    assert_eq!(comments[1].0, 2);
    assert!(comments[1].1.contains("tests/"));
    assert!(!comments[1].1.contains("docs/x.md"));
}
