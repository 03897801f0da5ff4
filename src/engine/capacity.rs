//! Capacity at admission: ModelProfiles (`profiles`), whether a model
//! fits its GPUs (`fit`, and `sizing` for a service's shape), a service's
//! charge against its namespace's budget (`charge`) and the budgets
//! themselves (`budget`).

pub mod budget;
pub mod charge;
pub mod fit;
pub mod profiles;
pub mod sizing;
