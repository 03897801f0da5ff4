//! Every `infergate.dev/*` label and annotation name, once, and the
//! values of the `infergate.dev/track` label.

use super::words::words;

/// `infergate.dev/service: S` on every child.
pub const LABEL_SERVICE: &str = "infergate.dev/service";
/// `infergate.dev/track: primary|canary` on every child ([`Track`]).
pub const LABEL_TRACK: &str = "infergate.dev/track";
/// `infergate.dev/worker-of: primary|canary` on the worker pods of a
/// group (a replica that spans nodes) in place of [`LABEL_TRACK`]: they
/// serve no API, so no selector of the track's picks them.
pub const LABEL_WORKER_OF: &str = "infergate.dev/worker-of";
/// Pod label recording `spec.resources.gpuMemory` (sanitised) for scheduling policies.
pub const LABEL_GPU_MEMORY: &str = "infergate.dev/gpu-memory";
/// `infergate.dev/component: endpoint-picker` on an endpoint picker's pods.
pub const LABEL_COMPONENT: &str = "infergate.dev/component";
/// `infergate.dev/pool: <pool>` on an endpoint picker's pods (one picker per pool).
pub const LABEL_POOL: &str = "infergate.dev/pool";
/// The label every budget ledger carries.
pub const LABEL_LEDGER: &str = "infergate.dev/ledger";
/// The label naming the namespace a ledger counts.
pub const LABEL_NAMESPACE: &str = "infergate.dev/namespace";

/// Annotation on every child: a digest of the object infergate last applied
/// (the desired object without this annotation). A child whose digest
/// matches what the service wants now is not written again.
pub const ANNOTATION_APPLIED: &str = "infergate.dev/applied-digest";
/// Annotation on a track's Deployment: a digest of the pod template
/// infergate last applied to it. A track runs a rollout's version only
/// when its Deployment carries the digest of that version's whole template
/// (model image, env and placement included) and the deployment controller
/// has seen it (`status.observedGeneration`).
pub const ANNOTATION_TEMPLATE: &str = "infergate.dev/template-digest";
/// Annotation on a primary Deployment rolled in place for want of room
/// (`spec.rollout.onFullPool: Replace`): `Replace N: <the numbers>`, the
/// plan its rollout keeps until the template changes again (a restart
/// mid-rollout finds it there and changes nothing).
pub const ANNOTATION_ROLL_PLAN: &str = "infergate.dev/roll-plan";
/// Annotation on a primary Deployment that lends replicas to its canary
/// (`canary.onFullPool: Borrow`): how many it runs fewer than the spec
/// asks, given back once the canary goes.
pub const ANNOTATION_LENT: &str = "infergate.dev/lent-replicas";
/// The endpoint picker's pod template's digest of its configuration.
pub const ANNOTATION_CONFIG_HASH: &str = "infergate.dev/config-hash";
/// The annotation whose value `VERB/TOKEN` acts on a rollout at most once
/// per value, ever (the values acted on are kept in
/// `status.rollout.actionsSeen`).
pub const ANNOTATION_ROLLOUT_ACTION: &str = "infergate.dev/rollout-action";
/// The annotation that asks for a fetch of the serving graph, at most once
/// per value ever (the values acted on are kept in
/// `status.graph.refreshesSeen`).
pub const ANNOTATION_GRAPH_REFRESH: &str = "infergate.dev/graph-refresh";
/// The annotation by which a Secret's owner lists the hosts its token may
/// be sent to (comma-separated host patterns).
pub const ANNOTATION_GRAPH_TOKEN_HOSTS: &str = "infergate.dev/graph-token-hosts";
/// The webhook Secret's annotation naming the trust bundle the lease
/// holder wrote into every `caBundle`.
pub const ANNOTATION_CA_BUNDLE_INJECTED: &str = "infergate.dev/ca-bundle-injected";
/// Annotation recording where each defaulted field came from.
pub const ANNOTATION_DEFAULTED_FROM: &str = "infergate.dev/defaulted-from";
/// Annotation carrying what one version cannot express across a conversion.
pub const ANNOTATION_CONVERSION_DATA: &str = "infergate.dev/conversion-data";
/// Stands for every other annotation where the conversion only asks
/// whether there are any (never written to an object).
pub const ANNOTATION_OTHERS: &str = "infergate.dev/other-annotations";

words! {
    /// Which track a child belongs to: the `infergate.dev/track` label value.
    pub enum Track("track") {
        /// The primary model.
        Primary => "primary",
        /// The canary model.
        Canary => "canary",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_parse_back() {
        for t in Track::ALL {
            assert_eq!(t.as_str().parse::<Track>(), Ok(*t));
        }
        assert!("workers".parse::<Track>().is_err());
    }
}
