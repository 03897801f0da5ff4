//! The words of infergate's API besides its kinds: condition types and
//! statuses, reasons, every `infergate.dev/*` label and annotation name,
//! and the few condition messages another component reads back. Each is
//! spelled here once; the reconciler writes them and the plugin reads them
//! through these types.
//!
//! - `words`: how a closed set of words is declared ([`UnknownWord`]);
//! - `condition`: [`ConditionType`] and [`CondStatus`];
//! - `reason`: [`Reason`], with [`GraphReason`] and [`RolloutReason`];
//! - `names`: the label and annotation names, and [`Track`];
//! - `message`: the messages that carry facts, formatted and parsed.

pub mod condition;
pub mod message;
pub mod names;
pub mod reason;
mod words;

pub use condition::{CondStatus, ConditionType};
pub use names::Track;
pub use reason::{GraphReason, Reason, RolloutReason};
pub use words::UnknownWord;
