//! The committed webhook registrations (`webhooks/`): scoped to
//! infergate's kinds (or, for the confinement of its own writes, to its
//! own ServiceAccount) and explicit about every policy.

use std::path::Path;

#[test]
fn registrations_are_scoped_and_explicit() {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhookConfiguration,
        WebhookClientConfig,
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("webhooks");
    let m: MutatingWebhookConfiguration =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("mutating.yaml")).unwrap())
            .unwrap();
    let v: ValidatingWebhookConfiguration =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("validating.yaml")).unwrap())
            .unwrap();
    assert_eq!(
        m.metadata.name.as_deref(),
        Some(infergate::webhook::tls::selfsigned::MUTATING_WEBHOOK_CONFIGURATION)
    );
    assert_eq!(
        v.metadata.name.as_deref(),
        Some(infergate::webhook::tls::selfsigned::VALIDATING_WEBHOOK_CONFIGURATION)
    );

    let check = |name: &str,
                 versions: &[String],
                 side: &str,
                 timeout: Option<i32>,
                 failure: Option<&str>,
                 matching: Option<&str>,
                 cc: &WebhookClientConfig,
                 rules: &[RuleWithOperations],
                 path: &str| {
        assert_eq!(versions, ["v1"], "{name}");
        // The service hook charges GPU budget ledgers, never on a dry run.
        let side_effects = if name == "validate.inferenceservices.infergate.dev" {
            "NoneOnDryRun"
        } else {
            "None"
        };
        assert_eq!(side, side_effects, "{name}");
        assert!(
            timeout.is_some_and(|t| (1..=10).contains(&t)),
            "{name}: explicit timeoutSeconds"
        );
        assert_eq!(failure, Some("Fail"), "{name}");
        assert_eq!(matching, Some("Equivalent"), "{name}");
        let svc = cc.service.as_ref().expect("service reference");
        assert_eq!(svc.path.as_deref(), Some(path), "{name}");
        assert_eq!(svc.name, infergate::crdgen::SERVICE_NAME);
        assert_eq!(svc.namespace, infergate::crdgen::SERVICE_NAMESPACE);
        assert!(!rules.is_empty());
        for r in rules {
            assert_eq!(
                r.api_groups.as_deref(),
                Some(&["infergate.dev".to_owned()][..]),
                "{name}"
            );
            assert_eq!(
                r.api_versions.as_deref(),
                Some(&["v1beta1".to_owned()][..]),
                "{name}"
            );
            let ops = r.operations.clone().unwrap_or_default();
            assert_eq!(ops, ["CREATE", "UPDATE"], "{name}");
            for res in r.resources.iter().flatten() {
                assert!(
                    [
                        "inferenceservices",
                        "clusterinferencepolicies",
                        "inferencepolicies"
                    ]
                    .contains(&res.as_str()),
                    "{name}: {res} is not an infergate kind"
                );
            }
        }
    };
    // Mutating and validating webhooks share these fields but no type.
    macro_rules! check {
        ($w:expr, $path:expr) => {
            check(
                &$w.name,
                &$w.admission_review_versions,
                &$w.side_effects,
                $w.timeout_seconds,
                $w.failure_policy.as_deref(),
                $w.match_policy.as_deref(),
                &$w.client_config,
                $w.rules.as_deref().unwrap_or_default(),
                $path,
            )
        };
    }
    let mw = m.webhooks.unwrap();
    assert_eq!(mw.len(), 1);
    for w in &mw {
        assert_eq!(w.reinvocation_policy.as_deref(), Some("IfNeeded"));
        check!(w, "/mutate");
    }
    let all = v.webhooks.unwrap();
    // The confinement of infergate's own child writes: called for nobody
    // but infergate's ServiceAccount, whatever the kind.
    let (confine, vw): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|w| w.name == "confine.children.infergate.dev");
    assert_eq!(confine.len(), 1, "the confining webhook is registered");
    let confine = &confine[0];
    let conditions = confine.match_conditions.clone().unwrap_or_default();
    assert_eq!(
        conditions.first().map(|c| c.expression.as_str()),
        Some("request.userInfo.username == 'system:serviceaccount:infergate-system:infergate'"),
        "the confining webhook matches infergate's username before anything else"
    );
    assert_eq!(confine.side_effects, "None");
    assert_eq!(confine.failure_policy.as_deref(), Some("Fail"));
    assert!(
        confine
            .timeout_seconds
            .is_some_and(|t| (1..=10).contains(&t))
    );
    for r in confine.rules.iter().flatten() {
        assert_eq!(
            r.operations.as_deref(),
            Some(&["CREATE".to_owned(), "UPDATE".to_owned()][..])
        );
        assert!(
            !r.api_groups
                .iter()
                .flatten()
                .any(|g| g == "infergate.dev" || g == "*"),
            "the confining webhook is for children, not infergate's kinds: {r:?}"
        );
    }
    let mut resources: Vec<String> = vw
        .iter()
        .flat_map(|w| {
            w.rules
                .iter()
                .flatten()
                .flat_map(|r| r.resources.clone().unwrap_or_default())
        })
        .collect();
    resources.sort();
    assert_eq!(
        resources,
        [
            "clusterinferencepolicies",
            "inferencepolicies",
            "inferenceservices"
        ]
    );
    for w in &vw {
        check!(w, "/validate");
    }
}
