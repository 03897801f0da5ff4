//! Child processes: the built `infergate` binary, commands fed on stdin,
//! their output as text, long-running processes that die with the test
//! binary, and what the scripts of `tests/support` build into the cache.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, mpsc};

/// The `infergate` binary cargo built for this test or bench.
pub fn binary() -> &'static Path {
    // Unset when an example includes this module: it locates the binary itself.
    match option_env!("CARGO_BIN_EXE_infergate") {
        Some(path) => Path::new(path),
        None => panic!("cargo sets CARGO_BIN_EXE_infergate for tests and benches only"),
    }
}

/// Run `infergate ARGS` to completion.
pub fn infergate(args: &[&str]) -> Output {
    run(Command::new(binary()).args(args), None)
}

/// Run `cmd` to completion with `stdin` as its standard input (none: empty),
/// capturing stdout and stderr.
pub fn run(cmd: &mut Command, stdin: Option<&[u8]>) -> Output {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let Some(input) = stdin else {
        return cmd
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    let mut pipe = child.stdin.take().expect("stdin is piped");
    let input = input.to_vec();
    // Written from a thread: a child that answers before reading all its
    // input must not block on a full stdout pipe.
    let writer = std::thread::spawn(move || pipe.write_all(&input));
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {program}: {e}"));
    // A child may exit without reading all of its input: not an error here.
    let _ = writer.join();
    out
}

/// Standard output followed by standard error, as a user sees them.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The last `lines` lines of a log file (empty when unreadable).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

type SpawnRequest = (Command, PathBuf, mpsc::Sender<std::io::Result<Child>>);

/// Spawn `cmd` with its output going to `log`, from a thread that lives as
/// long as the process, with PR_SET_PDEATHSIG so the child is killed when the
/// test binary exits.
pub fn spawn_logged(cmd: Command, log: &Path) -> std::io::Result<Child> {
    static SUPERVISOR: Mutex<Option<mpsc::Sender<SpawnRequest>>> = Mutex::new(None);
    let sender = {
        let mut guard = SUPERVISOR.lock().expect("supervisor lock");
        guard
            .get_or_insert_with(|| {
                let (tx, rx) = mpsc::channel::<SpawnRequest>();
                std::thread::Builder::new()
                    .name("process-supervisor".into())
                    .spawn(move || {
                        for (mut cmd, log, reply) in rx {
                            let result = (|| {
                                let out = std::fs::File::create(&log)?;
                                let err = out.try_clone()?;
                                cmd.stdin(Stdio::null()).stdout(out).stderr(err);
                                // SAFETY: prctl is async-signal-safe; it only sets this
                                // child's parent-death signal before exec.
                                unsafe {
                                    cmd.pre_exec(|| {
                                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                                            return Err(std::io::Error::last_os_error());
                                        }
                                        Ok(())
                                    });
                                }
                                cmd.spawn()
                            })();
                            let _ = reply.send(result);
                        }
                        // The sender lives in a static: the loop ends only with the process.
                        loop {
                            std::thread::park();
                        }
                    })
                    .expect("spawning the supervisor thread");
                tx
            })
            .clone()
    };
    let (reply_tx, reply_rx) = mpsc::channel();
    sender
        .send((cmd, log.to_path_buf(), reply_tx))
        .map_err(|_| std::io::Error::other("supervisor thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("supervisor thread is gone"))?
}

/// What a script of `tests/support` builds or fetches into the cache, as the
/// path it prints: the path the environment variable `env` holds when set
/// (made elsewhere); else `bash tests/support/<script> ARGS` (built when
/// missing, its progress on stderr), which must succeed (`does` says what it
/// does and needs).
pub fn cached_by_script(env: &str, script: &str, args: &[&str], does: &str) -> PathBuf {
    if let Ok(path) = std::env::var(env) {
        return path.into();
    }
    let script = super::fixtures::root().join("tests/support").join(script);
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let run = std::iter::once(script.display().to_string())
        .chain(args.iter().map(|a| (*a).to_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        out.status.success(),
        "{run} failed ({}): {does}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout).trim().into()
}

/// A Go tool built by `tests/support/build-tool.sh NAME` (helm, lwepp) from
/// its Go module into the cache, built when missing; `INFERGATE_<NAME>`
/// names one built elsewhere.
pub fn go_tool(name: &str) -> PathBuf {
    cached_by_script(
        &format!("INFERGATE_{}", name.to_uppercase()),
        "build-tool.sh",
        &[name],
        &format!("it builds {name} from its Go module"),
    )
}

/// The Gateway API Inference Extension's minimal endpoint picker.
pub fn lwepp_binary() -> PathBuf {
    go_tool("lwepp")
}
