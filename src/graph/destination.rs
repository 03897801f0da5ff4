//! Where a graph fetch may connect: the URL's address, or what its host
//! resolves to, without internal addresses unless a policy lists the host
//! literally; and the resolver that lets a fetch's client connect only to
//! the addresses checked (no second lookup, no other name).
//!
//! - `registry`: which addresses are internal;
//! - `resolve`: the addresses a fetch may connect to, and its resolver.

mod registry;
mod resolve;

pub use registry::{Form, Internal, internal_category};
pub(super) use resolve::{Checked, destination};

#[cfg(test)]
mod tests;
