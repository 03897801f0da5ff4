//! Where the answer goes: the pieces it is written in, and the tally of
//! objects converted that becomes the metrics.

use std::collections::BTreeMap;

use crate::metrics::Metrics;

/// The answer is written in pieces of about this size: no buffer is ever
/// grown (and copied) to the size of the whole answer.
pub(super) const PIECE: usize = 1 << 20;

/// The answer being written: full pieces and the current one.
#[derive(Default)]
pub(super) struct Pieces {
    pub(super) done: Vec<Vec<u8>>,
    pub(super) current: Vec<u8>,
}

impl Pieces {
    /// Start a new piece when the current one is full (between objects).
    pub(super) fn cut(&mut self) {
        if self.current.len() >= PIECE {
            let full = std::mem::replace(&mut self.current, Vec::with_capacity(PIECE + PIECE / 4));
            self.done.push(full);
        }
    }

    pub(super) fn clear(&mut self) {
        self.done.clear();
        self.current.clear();
    }

    pub(super) fn finish(mut self) -> Vec<Vec<u8>> {
        self.done.push(self.current);
        self.done
    }
}

/// Objects converted per source version and result, recorded once per
/// review (a metric update per object would cost more than converting it).
#[derive(Default)]
pub(super) struct Tally {
    pub(super) desired: String,
    counts: BTreeMap<(&'static str, bool), u64>,
}

impl Tally {
    pub(super) fn add(&mut self, from: &'static str, success: bool) {
        *self.counts.entry((from, success)).or_default() += 1;
    }

    pub(super) fn record(&self, metrics: &Metrics) {
        for ((from, success), n) in &self.counts {
            metrics.conversions(from, &self.desired, *success, *n);
        }
    }
}
