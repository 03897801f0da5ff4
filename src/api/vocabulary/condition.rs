//! The condition types infergate writes in `status.conditions`, and a
//! condition's `status`.

use super::words::words;

words! {
    /// A condition type of an InferenceService.
    pub enum ConditionType("condition type") {
        /// The service serves: every wanted replica of every track is
        /// ready and up to date.
        Ready => "Ready",
        /// The desired children were applied for the current generation.
        Reconciled => "Reconciled",
        /// An HTTPRoute routes traffic to the service.
        RoutingReady => "RoutingReady",
        /// The service complies with every applicable policy.
        PolicyCompliant => "PolicyCompliant",
        /// The serving graph was fetched, decoded and validated
        /// (`backend: RayService`).
        GraphReady => "GraphReady",
        /// A change that rolls the primary fits the AcceleratorClass's free
        /// devices, or is done (False: it replaces in place or waits).
        RolloutCapacity => "RolloutCapacity",
        /// The canary track runs; False with reason `CanaryCapacity` while
        /// its pods do not fit the AcceleratorClass's free devices.
        CanaryReady => "CanaryReady",
    }
}

words! {
    /// A condition's `status`.
    pub enum CondStatus("condition status") {
        /// `True`.
        True => "True",
        /// `False`.
        False => "False",
        /// `Unknown`: not decided yet (a graph fetch waiting in line).
        Unknown => "Unknown",
    }
}

impl From<bool> for CondStatus {
    fn from(b: bool) -> Self {
        if b { Self::True } else { Self::False }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_parses_back() {
        for t in ConditionType::ALL {
            assert_eq!(t.as_str().parse::<ConditionType>(), Ok(*t));
            assert_eq!(t.to_string(), t.as_str());
        }
        for s in CondStatus::ALL {
            assert_eq!(s.as_str().parse::<CondStatus>(), Ok(*s));
        }
        assert!("ready".parse::<ConditionType>().is_err());
        assert_eq!(CondStatus::from(true), "True");
    }
}
