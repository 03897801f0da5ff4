//! The Gateway API HTTPRoute types, as the reconciler names them; they
//! are the API's wire types of the Gateway API
//! ([`crate::api::upstream::gateway_api`]).

pub use crate::api::upstream::gateway_api::*;
