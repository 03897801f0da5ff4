//! Shared by the benches (each bench is its own crate and includes this).

pub mod reviews;
