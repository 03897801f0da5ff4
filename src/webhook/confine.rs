//! infergate's own writes of children, checked against the service that
//! controls them: the webhook `confine.children.infergate.dev`
//! (`webhooks/validating.yaml`), which the API server calls only for
//! requests of infergate's own ServiceAccount whose object has an
//! InferenceService as its controller.
//!
//! The ValidatingAdmissionPolicy `infergate-confine`
//! (`deploy/admissionpolicy.yaml`) checks what a written object says on its
//! own; a policy cannot look another object up. What needs the service is
//! checked here, from the webhook's watch cache of services and, when the
//! cache does not agree, from the API server:
//!
//! - the controlling InferenceService exists in the object's namespace,
//!   with the uid the reference carries;
//! - every pod template runs as a ServiceAccount that service allows: the
//!   one it names (`default` when none), or for an endpoint picker's
//!   Deployment `<service>-epp` / `<service>-canary-epp`, only for a service
//!   whose pickers infergate runs;
//! - a Role or RoleBinding (an endpoint picker's) belongs to a service whose
//!   pickers infergate runs.
//!
//! A stolen token of infergate's ServiceAccount therefore cannot point a
//! child at a service that does not exist to skip these checks. The code
//! that answers is infergate's own, so a compromised infergate process is
//! not bound by this part (docs/security.md says what it can do).
//!
//! - `child`: a written child as far as its checks read it ([`Child`]);
//! - `needs`: what it needs of its controlling service ([`Needs`]), and the check;
//! - `owners`: the API server asked when the cache does not confirm ([`Owners`]).

mod child;
mod needs;
mod owners;

pub use child::Child;
pub use needs::Needs;
pub use owners::{LOOKUP_TIMEOUT, Owners};

#[cfg(test)]
mod tests;
