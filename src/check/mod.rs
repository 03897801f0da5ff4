//! The offline commands: `infergate check` runs the engine over manifest
//! files ([`manifests`]); `infergate graph` validates a serving graph and,
//! with `--service`, checks it against a service's workers ([`graph`]);
//! `charges` charges the services under check against their namespaces' GPU budgets;
//! `names` holds their served names, one owner per (Gateway, hostname, name).

mod charges;
pub mod graph;
pub mod manifests;
mod names;

pub use manifests::{Options, OutputFormat, Report, check, parse_labels, render_output, run};
