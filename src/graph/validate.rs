//! The serving graph as a DAG, and Ray Serve's own rules. Pure functions.
//!
//! [`validate`] runs every rule and reports every violation at once; each
//! rule is also a function of its own so it can be tested alone:
//! [`unique_names`], [`dependencies_exist`], [`find_cycle`], [`ingress`],
//! [`reachable_from_ingress`], [`import_path`], [`scaling`],
//! [`actor_options`], [`user_config`] and [`route_prefix`].

//!
//! - `dag`: [`validate`] and the [`Dag`] of a graph that passes;
//! - `graph_rules`: the rules about the graph as a whole;
//! - `node_rules`: the rules about one node;
//! - `order`: the nodes by index, and their topological order.

mod dag;
mod graph_rules;
mod node_rules;
mod order;

pub use super::violation::{Violation, Violations};
pub use dag::{Dag, validate};
pub use graph_rules::{
    app_name, dependencies_exist, find_cycle, ingress, reachable_from_ingress, route_prefix,
    unique_names,
};
pub use node_rules::{actor_options, import_path, scaling, user_config};

#[cfg(test)]
mod tests;
