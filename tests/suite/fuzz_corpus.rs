//! The fuzz corpus (`fuzz/corpus/<target>/`), replayed on stable through
//! the same checks the fuzz targets run (`fuzz/checks.rs`): every input
//! the fuzzer ever kept, and every crash found and fixed, stays a test.

#[path = "../../fuzz/checks.rs"]
mod checks;

use std::path::PathBuf;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "no corpus in {}", dir.display());
    for input in &inputs {
        let data = std::fs::read(input).unwrap();
        let replayed = std::panic::catch_unwind(|| check(&data));
        assert!(
            replayed.is_ok(),
            "{target}: the check failed on {}",
            input.display()
        );
    }
}

#[test]
fn review_decode_corpus() {
    replay("review_decode", checks::review_decode);
}

#[test]
fn conversion_corpus() {
    replay("conversion", checks::conversion);
}

#[test]
fn policy_files_corpus() {
    replay("policy_files", checks::policy_files);
}
