//! Capacity at admission: whether a model fits its GPUs (`fit`, and
//! `sizing` for a service's shape on its class, `flags` for the engine
//! flags it reads from `engine.args`), a service's charge
//! against its namespace's budget (`charge`) and the budgets themselves
//! (`budget`). The ModelProfiles are part of the engine's context.
//! Free devices of a class's pool: which nodes its pods may use
//! (`nodes`) and what is free on them (`room`); how a rollout of the
//! primary is carried out on that pool (`roll_plan`).

pub mod budget;
pub mod charge;
pub mod fit;
pub mod flags;
pub mod nodes;
pub mod roll_plan;
pub mod room;
pub mod sizing;
