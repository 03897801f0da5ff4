//! How a bench that drives its own measurements (no criterion) starts.

#![allow(dead_code)]

/// The multi-threaded runtime the bench runs on, with ring as the process's
/// rustls provider; `None` under `--list` (`cargo bench -- --list`, test
/// discovery: there is nothing to list).
pub fn bench_runtime() -> Option<tokio::runtime::Runtime> {
    if std::env::args().any(|a| a == "--list") {
        return None;
    }
    crate::support::install_crypto_provider();
    Some(
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime"),
    )
}
