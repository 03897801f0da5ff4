//! The finding of a progressive rollout: held by its gate, paused, or
//! rolled back.

use super::commands::Commands;
use super::finding::{Finding, Severity, finding, quote, rank};
use crate::api::rollout::RolloutPhase;
use crate::api::vocabulary::{RolloutReason, Track};
use crate::plugin::facts::{ServiceFacts, split_verdict};

/// The rollout: held by its gate, paused, or rolled back.
pub(super) fn rollout(f: &ServiceFacts, cmd: &Commands) -> Option<Finding> {
    let r = f.rollout.as_ref()?;
    let (reason, message) = split_verdict(r.verdict.as_deref()?);
    let target = r
        .target
        .as_deref()
        .map(|t| format!(" of {t}"))
        .unwrap_or_default();
    let typed = reason.and_then(|r| r.parse::<RolloutReason>().ok());
    let (rank, severity, sentence, next) = match (r.phase.parse(), typed) {
        (Ok(RolloutPhase::Progressing), Some(held)) if held.is_gate_hold() => (
            rank::GATE,
            Severity::Blocking,
            format!(
                "The canary{target} is held at weight {} by the rollout's gate: {}",
                r.weight.unwrap_or(0),
                quote(message)
            ),
            cmd.rollout_status(),
        ),
        (Ok(RolloutPhase::Paused), _) => (
            rank::PAUSED,
            Severity::Notice,
            format!(
                "The rollout{target} is paused at weight {}; it goes on when resumed.",
                r.weight.unwrap_or(0)
            ),
            cmd.rollout_resume(),
        ),
        (Ok(RolloutPhase::RolledBack), _) => (
            rank::ROLLED_BACK,
            Severity::Notice,
            format!(
                "The rollout{target} was rolled back; the primary keeps the stable version until the spec changes: {}",
                quote(message)
            ),
            cmd.rollout_status(),
        ),
        _ => return None,
    };
    Some(finding(
        rank,
        severity,
        reason.unwrap_or(&r.phase),
        Some(Track::Canary.as_str()),
        sentence,
        Some(next),
    ))
}
