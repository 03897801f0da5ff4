//! Shared by the benches (each bench is its own crate and includes this,
//! beside `tests/support` as `support`).

pub mod reviews;
pub mod run;
