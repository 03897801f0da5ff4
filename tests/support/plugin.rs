//! The kubectl plugin: the built binary as `kubectl-infergate` in a
//! directory of its own (for `PATH`), and recorded expectations of its
//! human output, which a change of that output must update.

use std::path::PathBuf;
use std::sync::OnceLock;

/// A directory holding `kubectl-infergate`, a symlink to the built binary.
pub fn plugin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("infergate-plugin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("plugin dir");
        let link = dir.join("kubectl-infergate");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(super::process::binary(), &link)
            .expect("symlink kubectl-infergate");
        dir
    })
    .clone()
}

/// Compare `actual` with the recorded `NAME.txt` in `tests/fixtures/plugin/`;
/// `INFERGATE_UPDATE_FIXTURES=1` records it instead. `replace` pairs turn
/// what differs from run to run (a namespace's random suffix, a port) into
/// fixed words first.
pub fn assert_recorded(name: &str, actual: &str, replace: &[(&str, &str)]) {
    let mut text = actual.to_owned();
    for (from, to) in replace {
        text = text.replace(from, to);
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/plugin")
        .join(format!("{name}.txt"));
    if std::env::var_os("INFERGATE_UPDATE_FIXTURES").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("fixtures dir");
        std::fs::write(&path, &text).expect("record");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; record it with INFERGATE_UPDATE_FIXTURES=1\n--- actual ---\n{text}",
            path.display()
        )
    });
    assert!(
        want == text,
        "{} differs from the output (record a deliberate change with INFERGATE_UPDATE_FIXTURES=1)\n--- recorded ---\n{want}\n--- actual ---\n{text}",
        path.display()
    );
}
