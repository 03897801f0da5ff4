//! Why a condition is what it is, and why an event was written: every
//! reason infergate reports, the serving graph's and the rollout's in
//! their own enums.

use std::str::FromStr;

use super::words::{UnknownWord, words};

words! {
    /// Why a serving graph is not applied (`GraphReady`, and `Reconciled`
    /// while the graph is not usable); the table in
    /// `examples/graphs/README.md`, "Condition reasons".
    pub enum GraphReason("graph reason") {
        /// The URL is not usable or its host is not an allowed destination.
        DestinationNotAllowed => "DestinationNotAllowed",
        /// The token's Secret or its key is missing or unusable.
        SecretNotFound => "SecretNotFound",
        /// The Secret does not allow its token to be sent to the URL's host.
        SecretNotAllowed => "SecretNotAllowed",
        /// infergate may not read the Secret.
        SecretForbidden => "SecretForbidden",
        /// The host name did not resolve.
        DnsFailure => "DNSFailure",
        /// No connection, or the exchange broke.
        ConnectFailure => "ConnectFailure",
        /// The service waits in line for a fetch slot.
        FetchQueued => "FetchQueued",
        /// The TLS handshake failed.
        TlsFailure => "TLSFailure",
        /// The server answered something other than 200 or 304.
        HttpStatus => "HTTPStatus",
        /// The fetch did not complete within its deadline.
        Timeout => "Timeout",
        /// The body is larger than the size cap.
        TooLarge => "TooLarge",
        /// The graph is missing, undecodable, invalid or cannot be rendered.
        InvalidGraph => "InvalidGraph",
        /// A deployment asks more than one worker offers.
        Unschedulable => "Unschedulable",
        /// The latest fetch failed; the last good graph keeps serving.
        StaleGraph => "StaleGraph",
        /// The RayService could not be built (no owner, no engine image).
        BuildFailed => "BuildFailed",
    }
}

words! {
    /// Why a progressive rollout is where it is (`status.rollout.reason`)
    /// and why a rollout event was written.
    pub enum RolloutReason("rollout reason") {
        /// The primary runs the stable version.
        Stable => "Stable",
        /// The canary is not fully ready yet.
        WaitingForCanary => "WaitingForCanary",
        /// The canary's pods wait for room on the class's pool (the
        /// progress deadline does not run meanwhile).
        WaitingForRoom => "WaitingForRoom",
        /// The spec went back to the stable version.
        Reverted => "Reverted",
        /// The target became the stable version.
        Promoted => "Promoted",
        /// Event: the rollout failed and was rolled back.
        RolledBack => "RolledBack",
        /// Aborted by the rollout-action annotation.
        Aborted => "Aborted",
        /// Paused by the rollout-action annotation.
        Paused => "Paused",
        /// The canary's containers restarted too often.
        CanaryRestarts => "CanaryRestarts",
        /// The primary is being rolled to the target.
        Promoting => "Promoting",
        /// The canary was not ready within the progress deadline.
        ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
        /// A step is being soaked.
        StepHeld => "StepHeld",
        /// The gate has no Prometheus address: the step holds.
        NoPrometheusAddress => "NoPrometheusAddress",
        /// The gate's query returned no sample: the step holds.
        AnalysisNoData => "AnalysisNoData",
        /// The gate's query is outside its threshold.
        AnalysisFailed => "AnalysisFailed",
        /// Event: a rollout started.
        RolloutStarted => "RolloutStarted",
        /// Event: the spec was reverted to the stable version.
        RolloutReverted => "RolloutReverted",
        /// Event: a new version restarted the rollout.
        RolloutRestarted => "RolloutRestarted",
        /// Event: the target is now stable.
        RolloutPromoted => "RolloutPromoted",
        /// Event: the rollout was paused.
        RolloutPaused => "RolloutPaused",
        /// Event: the rollout was resumed.
        RolloutResumed => "RolloutResumed",
        /// Event: the primary is being rolled to the target.
        RolloutPromoting => "RolloutPromoting",
        /// Event: a rollout action that does nothing now.
        RolloutActionIgnored => "RolloutActionIgnored",
        /// Event: the canary moved to a step.
        RolloutStep => "RolloutStep",
    }
}

impl RolloutReason {
    /// Whether a step with this reason is held by its gate past its soak
    /// (it waits for the gate, not for time).
    #[must_use]
    pub fn holds_past_soak(self) -> bool {
        matches!(self, Self::AnalysisNoData | Self::NoPrometheusAddress)
    }

    /// Whether the rollout's gate holds the canary at its step.
    #[must_use]
    pub fn is_gate_hold(self) -> bool {
        self.holds_past_soak() || self == Self::AnalysisFailed
    }
}

/// Why a condition is what it is, and why an event was written: every
/// reason infergate reports, in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Every child is applied.
    Applied,
    /// Every track's replicas are ready and up to date.
    Available,
    /// A track is short of ready or up-to-date replicas.
    Progressing,
    /// The HTTPRoute is applied and not rejected.
    RouteApplied,
    /// A gateway rejected the HTTPRoute.
    RouteNotAccepted,
    /// No gateway is set: no HTTPRoute.
    NoGateway,
    /// The Gateway API CRDs are not installed.
    GatewayApiNotInstalled,
    /// The InferencePool CRD is not installed.
    InferencePoolNotInstalled,
    /// A gateway reports a problem with an InferencePool.
    InferencePoolNotAccepted,
    /// The spec fails validation.
    InvalidSpec,
    /// Applying a child failed.
    ApplyFailed,
    /// The serving graph is valid and applied.
    GraphResolved,
    /// A serving-graph failure, with the graph's own reason.
    Graph(GraphReason),
    /// Event: a step of a progressive rollout, with its own reason.
    Rollout(RolloutReason),
    /// The KubeRay CRDs are not installed.
    RayServiceNotInstalled,
    /// The LeaderWorkerSet CRD is not installed (a replica spans nodes).
    LeaderWorkerSetNotInstalled,
    /// KubeRay has not reported on the RayService yet.
    RayServicePending,
    /// The RayService is ready.
    RayServiceReady,
    /// The RayService is not ready.
    RayServiceNotReady,
    /// The service complies with every applicable policy.
    Compliant,
    /// The service violates a Deny policy adopted after it.
    PolicyViolation,
    /// The service violates a Warn policy.
    PolicyWarning,
    /// The service's charge no longer fits its namespace's budget.
    OverBudget,
    /// A model of the service no longer fits its GPUs (a later
    /// ModelProfile or AcceleratorClass); the service goes on running.
    NoLongerFits,
    /// Event: a child was created.
    Created,
    /// Event: a child was changed.
    Updated,
    /// Event: a child was deleted.
    Deleted,
    /// Event: the service became ready; also the reason of a `Ready=True`
    /// condition made from a v1alpha1 `status.ready: true`.
    Ready,
    /// The reason of a `Ready=False` condition made from a v1alpha1
    /// `status.ready: false`.
    NotReady,
    /// The service's AcceleratorClass does not exist.
    AcceleratorClassNotFound,
    /// A track's pods find no node (the scheduler's message).
    Unschedulable,
    /// A track's pods cannot pull their image.
    ImagePullFailed,
    /// A track's engine container keeps exiting.
    CrashLooping,
    /// A track's pods are placed and not ready yet.
    Starting,
    /// KubeRay has not made the serve Service the route names yet.
    ServeServiceMissing,
    /// Event: a fetch asked for by `infergate.dev/graph-refresh` brought
    /// a new graph, now applied.
    GraphRefreshed,
    /// Event: a fetch asked for by `infergate.dev/graph-refresh` found the
    /// graph unchanged.
    GraphUnchanged,
    /// Event: a fetch asked for by `infergate.dev/graph-refresh` failed.
    GraphRefreshFailed,
    /// Event: a new serving graph was applied.
    GraphUpdated,
    /// `RolloutCapacity=False`: no room for one more replica, so the
    /// primary is rolled `maxUnavailable` replicas at a time in place.
    ReplacingInPlace,
    /// `RolloutCapacity=False`: no room for one more replica, so the
    /// primary keeps its old template until there is.
    WaitingForCapacity,
    /// `CanaryReady=False`: the canary's pods do not fit the free devices.
    CanaryCapacity,
    /// `RolloutCapacity=True`: no change of the primary waits for
    /// devices (it surges, or its rollout in place is done).
    RolledOut,
}

/// Every [`Reason`] but [`Reason::Graph`] and [`Reason::Rollout`], in the
/// order `FromStr` tries them (before the graph's and the rollout's).
const PLAIN: [Reason; 41] = [
    Reason::Applied,
    Reason::Available,
    Reason::Progressing,
    Reason::RouteApplied,
    Reason::RouteNotAccepted,
    Reason::NoGateway,
    Reason::GatewayApiNotInstalled,
    Reason::InferencePoolNotInstalled,
    Reason::InferencePoolNotAccepted,
    Reason::InvalidSpec,
    Reason::ApplyFailed,
    Reason::GraphResolved,
    Reason::RayServiceNotInstalled,
    Reason::LeaderWorkerSetNotInstalled,
    Reason::RayServicePending,
    Reason::RayServiceReady,
    Reason::RayServiceNotReady,
    Reason::Compliant,
    Reason::PolicyViolation,
    Reason::PolicyWarning,
    Reason::OverBudget,
    Reason::NoLongerFits,
    Reason::Created,
    Reason::Updated,
    Reason::Deleted,
    Reason::Ready,
    Reason::NotReady,
    Reason::AcceleratorClassNotFound,
    Reason::Unschedulable,
    Reason::ImagePullFailed,
    Reason::CrashLooping,
    Reason::Starting,
    Reason::ServeServiceMissing,
    Reason::GraphRefreshed,
    Reason::GraphUnchanged,
    Reason::GraphRefreshFailed,
    Reason::GraphUpdated,
    Reason::ReplacingInPlace,
    Reason::WaitingForCapacity,
    Reason::CanaryCapacity,
    Reason::RolledOut,
];

impl Reason {
    /// The CamelCase reason as conditions and events carry it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Applied => "Applied",
            Reason::Available => "Available",
            Reason::Progressing => "Progressing",
            Reason::RouteApplied => "RouteApplied",
            Reason::RouteNotAccepted => "RouteNotAccepted",
            Reason::NoGateway => "NoGateway",
            Reason::GatewayApiNotInstalled => "GatewayAPINotInstalled",
            Reason::InferencePoolNotInstalled => "InferencePoolNotInstalled",
            Reason::InferencePoolNotAccepted => "InferencePoolNotAccepted",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::ApplyFailed => "ApplyFailed",
            Reason::GraphResolved => "GraphResolved",
            Reason::Graph(reason) => reason.as_str(),
            Reason::Rollout(reason) => reason.as_str(),
            Reason::RayServiceNotInstalled => "RayServiceNotInstalled",
            Reason::LeaderWorkerSetNotInstalled => "LeaderWorkerSetNotInstalled",
            Reason::RayServicePending => "RayServicePending",
            Reason::RayServiceReady => "RayServiceReady",
            Reason::RayServiceNotReady => "RayServiceNotReady",
            Reason::Compliant => "Compliant",
            Reason::PolicyViolation => "PolicyViolation",
            Reason::PolicyWarning => "PolicyWarning",
            Reason::OverBudget => "OverBudget",
            Reason::NoLongerFits => "NoLongerFits",
            Reason::Created => "Created",
            Reason::Updated => "Updated",
            Reason::Deleted => "Deleted",
            Reason::Ready => "Ready",
            Reason::NotReady => "NotReady",
            Reason::AcceleratorClassNotFound => "AcceleratorClassNotFound",
            Reason::Unschedulable => "Unschedulable",
            Reason::ImagePullFailed => "ImagePullFailed",
            Reason::CrashLooping => "CrashLooping",
            Reason::Starting => "Starting",
            Reason::ServeServiceMissing => "ServeServiceMissing",
            Reason::GraphRefreshed => "GraphRefreshed",
            Reason::GraphUnchanged => "GraphUnchanged",
            Reason::GraphRefreshFailed => "GraphRefreshFailed",
            Reason::GraphUpdated => "GraphUpdated",
            Reason::ReplacingInPlace => "ReplacingInPlace",
            Reason::WaitingForCapacity => "WaitingForCapacity",
            Reason::CanaryCapacity => "CanaryCapacity",
            Reason::RolledOut => "RolledOut",
        }
    }

    /// Whether a condition turning False for this reason deserves a Warning event.
    #[must_use]
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            Reason::InvalidSpec
                | Reason::ApplyFailed
                | Reason::PolicyViolation
                | Reason::PolicyWarning
                | Reason::OverBudget
                | Reason::NoLongerFits
                | Reason::GatewayApiNotInstalled
                | Reason::InferencePoolNotInstalled
                | Reason::InferencePoolNotAccepted
                | Reason::RouteNotAccepted
                | Reason::RayServiceNotInstalled
                | Reason::LeaderWorkerSetNotInstalled
                | Reason::AcceleratorClassNotFound
                | Reason::Unschedulable
                | Reason::ImagePullFailed
                | Reason::CrashLooping
                | Reason::GraphRefreshFailed
                | Reason::Graph(_)
        )
    }
}

impl FromStr for Reason {
    type Err = UnknownWord;

    /// A reason's word; a word several reasons spell (`Unschedulable` is
    /// also a graph's reason) is the plain reason: parse a
    /// [`GraphReason`] where a graph's reason is meant.
    fn from_str(word: &str) -> Result<Self, Self::Err> {
        if let Some(plain) = PLAIN.iter().find(|r| r.as_str() == word) {
            return Ok(*plain);
        }
        if let Ok(graph) = word.parse() {
            return Ok(Reason::Graph(graph));
        }
        if let Ok(rollout) = word.parse() {
            return Ok(Reason::Rollout(rollout));
        }
        Err(UnknownWord {
            kind: "reason",
            word: word.to_owned(),
        })
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<Reason> for &str {
    fn eq(&self, other: &Reason) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Reason> for String {
    fn eq(&self, other: &Reason) -> bool {
        self.as_str() == other.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names every variant: a new one fails to compile here until it is
    /// listed in [`PLAIN`] (or carries an inner enum).
    fn listed(r: Reason) -> bool {
        match r {
            Reason::Graph(_) | Reason::Rollout(_) => true,
            Reason::Applied
            | Reason::Available
            | Reason::Progressing
            | Reason::RouteApplied
            | Reason::RouteNotAccepted
            | Reason::NoGateway
            | Reason::GatewayApiNotInstalled
            | Reason::InferencePoolNotInstalled
            | Reason::InferencePoolNotAccepted
            | Reason::InvalidSpec
            | Reason::ApplyFailed
            | Reason::GraphResolved
            | Reason::RayServiceNotInstalled
            | Reason::LeaderWorkerSetNotInstalled
            | Reason::RayServicePending
            | Reason::RayServiceReady
            | Reason::RayServiceNotReady
            | Reason::Compliant
            | Reason::PolicyViolation
            | Reason::PolicyWarning
            | Reason::OverBudget
            | Reason::NoLongerFits
            | Reason::Created
            | Reason::Updated
            | Reason::Deleted
            | Reason::Ready
            | Reason::NotReady
            | Reason::AcceleratorClassNotFound
            | Reason::Unschedulable
            | Reason::ImagePullFailed
            | Reason::CrashLooping
            | Reason::Starting
            | Reason::ServeServiceMissing
            | Reason::GraphRefreshed
            | Reason::GraphUnchanged
            | Reason::GraphRefreshFailed
            | Reason::GraphUpdated
            | Reason::ReplacingInPlace
            | Reason::WaitingForCapacity
            | Reason::CanaryCapacity
            | Reason::RolledOut => PLAIN.contains(&r),
        }
    }

    #[test]
    fn every_reason_parses_back() {
        for r in PLAIN {
            assert!(listed(r));
            assert_eq!(r.as_str().parse::<Reason>(), Ok(r));
        }
        let mut words: Vec<&str> = PLAIN.iter().map(|r| r.as_str()).collect();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), PLAIN.len(), "two plain reasons spell one word");
        for g in GraphReason::ALL {
            assert_eq!(g.as_str().parse::<GraphReason>(), Ok(*g));
            let r: Reason = g.as_str().parse().expect("reason");
            assert_eq!(r.as_str(), g.as_str());
            assert!(listed(Reason::Graph(*g)));
        }
        for o in RolloutReason::ALL {
            assert_eq!(o.as_str().parse::<RolloutReason>(), Ok(*o));
            let r: Reason = o.as_str().parse().expect("reason");
            assert_eq!(r.as_str(), o.as_str());
        }
        assert_eq!(
            "FetchQueued".parse::<Reason>(),
            Ok(Reason::Graph(GraphReason::FetchQueued))
        );
        assert_eq!("Unschedulable".parse::<Reason>(), Ok(Reason::Unschedulable));
        assert!("NoSuchReason".parse::<Reason>().is_err());
        assert_eq!(
            Reason::GatewayApiNotInstalled.to_string(),
            "GatewayAPINotInstalled"
        );
    }

    #[test]
    fn the_gate_holds_for_its_own_reasons() {
        let holds: Vec<_> = RolloutReason::ALL
            .iter()
            .filter(|r| r.is_gate_hold())
            .map(|r| r.as_str())
            .collect();
        assert_eq!(
            holds,
            ["NoPrometheusAddress", "AnalysisNoData", "AnalysisFailed"]
        );
    }
}
