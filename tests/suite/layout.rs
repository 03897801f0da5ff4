//! The layout's rules (docs/architecture.md), checked on the source: data
//! flows one way, the core stays pure, only `cli` knows clap, and no file
//! of `src/` or `tests/` grows past 800 lines.

use std::path::{Path, PathBuf};

fn sources(dir: &str) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read");
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    if root.is_file() {
        let text = std::fs::read_to_string(&root).expect("read");
        out.push((root, text));
    } else {
        walk(&root, &mut out);
    }
    assert!(!out.is_empty(), "no sources under {dir}");
    out
}

/// Lines of `text` that are code (not comments), with their numbers.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_start()))
        .filter(|(_, l)| !l.starts_with("//"))
}

fn assert_none(dir: &str, skip: &[&str], forbidden: &[&str], why: &str) {
    let mut found = Vec::new();
    for (path, text) in sources(dir) {
        let name = path.to_string_lossy();
        // A skip ending in `/` is a folder: every file under it.
        if skip
            .iter()
            .any(|s| name.ends_with(s) || (s.ends_with('/') && name.contains(s)))
        {
            continue;
        }
        for (n, line) in code_lines(&text) {
            for f in forbidden {
                if line.contains(f) {
                    found.push(format!("{}:{n}: {line}", path.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{why}:\n{}", found.join("\n"));
}

#[test]
fn only_cli_knows_clap_and_nothing_below_it_imports_it() {
    assert_none(
        "src",
        &["src/cli.rs", "src/cli/", "src/main.rs"],
        &["clap", "crate::cli", "infergate::cli"],
        "only the cli module (cli.rs and cli/) and main.rs may use clap or the cli module",
    );
}

#[test]
fn nothing_below_app_imports_it() {
    assert_none(
        "src",
        &[
            "src/cli.rs",
            "src/cli/",
            "src/main.rs",
            "src/app.rs",
            "src/lib.rs",
        ],
        &["crate::app"],
        "app.rs is the composition root: nothing it composes may import it",
    );
}

#[test]
fn the_core_does_no_io_and_knows_no_wire_format() {
    let forbidden = [
        "tokio",
        "reqwest",
        "kube::Client",
        "kube::Api",
        "std::fs",
        "std::net",
        "json_patch",
        "base64",
        "crate::webhook",
        "crate::reconcile",
        "crate::state",
    ];
    assert_none("src/engine", &[], &forbidden, "engine/ is pure");
    assert_none("src/api", &[], &forbidden, "api/ is pure");
}

#[test]
fn graph_does_not_reach_into_the_reconciler_or_the_cluster() {
    assert_none(
        "src/graph",
        &[],
        &[
            "crate::reconcile",
            "crate::webhook",
            "crate::state",
            "crate::check",
            "kube::Client",
            "kube::Api",
        ],
        "graph/ is pure but for its fetcher, and knows nothing of the reconciler",
    );
}

#[test]
fn the_edges_import_only_what_lies_below_them() {
    assert_none(
        "src/state",
        &[],
        &["crate::webhook", "crate::reconcile", "crate::check"],
        "state/ feeds the edges and imports none of them",
    );
    assert_none(
        "src/webhook",
        &[],
        &["crate::reconcile", "crate::check"],
        "webhook/ and reconcile/ are siblings",
    );
    assert_none(
        "src/reconcile",
        &[],
        &["crate::webhook", "crate::check"],
        "reconcile/ and webhook/ are siblings",
    );
    assert_none(
        "src/check",
        &[],
        &["crate::webhook", "crate::reconcile"],
        "check runs the engine offline, without the edges",
    );
}

#[test]
fn no_source_file_is_over_800_lines_and_conversion_files_are_under_400() {
    let mut found = Vec::new();
    for (path, text) in sources("src").into_iter().chain(sources("tests")) {
        let lines = text.lines().count();
        let name = path.to_string_lossy();
        let limit = if name.contains("src/webhook/conversion/") {
            400
        } else {
            800
        };
        if lines > limit {
            found.push(format!("{}: {lines} lines (limit {limit})", path.display()));
        }
    }
    assert!(
        found.is_empty(),
        "split these by concern (a test file into a module of its own with children, as tests/suite/hostile.rs is), their tests beside them:\n{}",
        found.join("\n")
    );
}

/// A folder's front door: its mod.rs, or the file named like it beside it
/// (`src/state/ledger.rs` beside `src/state/ledger/`).
fn is_front_door(path: &Path) -> bool {
    path.file_name().is_some_and(|f| f == "mod.rs") || path.with_extension("").is_dir()
}

#[test]
fn a_front_door_is_found_both_ways() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert!(is_front_door(&src.join("webhook/mod.rs")));
    assert!(is_front_door(&src.join("reconcile/status/mod.rs")));
    assert!(is_front_door(&src.join("state/ledger.rs")));
    assert!(!is_front_door(&src.join("state/ledger/book.rs")));
    assert!(!is_front_door(&src.join("lib.rs")));
}

/// Every folder of `src/` holds code of its own: a folder with nothing
/// but a `tests.rs` is a file's tests moved aside, which the tree shows as
/// a room.
#[test]
fn no_folder_holds_only_tests() {
    fn walk(dir: &Path, found: &mut Vec<String>) {
        let mut code = false;
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, found);
                code = true;
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|f| f != "tests.rs")
            {
                code = true;
            }
        }
        if !code {
            found.push(dir.display().to_string());
        }
    }
    let mut found = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut found,
    );
    assert!(
        found.is_empty(),
        "these folders hold only tests; split the module they test into the folder, or keep its tests beside it:\n{}",
        found.join("\n")
    );
}

/// A folder's front door (its mod.rs, or the file named like it beside it) only
/// declares its modules and re-exports.
#[test]
fn a_folders_front_door_only_declares_and_re_exports() {
    let definitions = [
        "struct ",
        "enum ",
        "trait ",
        "fn ",
        "impl ",
        "impl<",
        "const ",
        "static ",
        "type ",
        "macro_rules!",
    ];
    let mut found = Vec::new();
    for (path, text) in sources("src") {
        if !is_front_door(&path) {
            continue;
        }
        for (n, line) in code_lines(&text) {
            let item = line
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ")
                .trim_start_matches("async ");
            if definitions.iter().any(|d| item.starts_with(d)) {
                found.push(format!("{}:{n}: {line}", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a folder's front door (mod.rs, or x.rs beside x/) declares its modules and re-exports; its types and functions live in files of their own:\n{}",
        found.join("\n")
    );
}
