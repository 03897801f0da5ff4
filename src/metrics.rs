//! Prometheus metrics (prometheus-client).
//!
//! One [`Metrics`] value is created by `serve` and cloned (cheaply, it is an
//! `Arc`) into the admission handlers, the conversion handler, the
//! certificate manager and the reconciler. `GET /metrics` on the plain-HTTP
//! listener renders [`Metrics::encode`].
//!
//! Metric names (listed in the README, "Metrics"):
//! - `infergate_admission_requests_total{webhook,operation,allowed}`
//! - `infergate_admission_duration_seconds{webhook}` (histogram)
//! - `infergate_conversion_objects_total{from,to,result}`
//! - `infergate_reconcile_total{result}`
//! - `infergate_reconcile_duration_seconds` (histogram)
//! - `infergate_certificate_expiry_timestamp_seconds{certificate}`
//! - `infergate_access_reviews_total{result}`: SubjectAccessReviews of the
//!   references a service write adds (`allowed`, `denied`, `failed`,
//!   `timeout`), and answers taken from the cache (`cached`)
//! - `infergate_budget_ledger_writes_total{result}`: the GPU budget ledger:
//!   charges written at admission (`written`), writes that lost a race and
//!   were recomputed (`conflict`), charges the budget refused (`denied`),
//!   writes that failed or ran out of time (`failed`), and the
//!   reconciler's corrections (`corrected`)
//! - `infergate_child_watch_starts_total{kind}`: watches of a child kind
//!   started (once per leadership term; an optional CRD's again each time
//!   it is installed)
//! - `infergate_child_watch_errors_total{kind}`: errors of those watches
//! - `infergate_optional_api_installed{kind}`: whether the optional CRD of
//!   a child kind is served (1) or not (0), as the reconciler last saw it

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Which admission webhook handled a request (the `webhook` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Webhook {
    /// `POST /mutate`.
    Mutate,
    /// `POST /validate`.
    Validate,
}

impl Webhook {
    /// The label value: `mutate` or `validate`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Mutate => "mutate",
            Webhook::Validate => "validate",
        }
    }
}

/// Which certificate an expiry refers to (the `certificate` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CertificateKind {
    /// The leaf certificate the TLS listener serves.
    Serving,
    /// The CA that signed it (self-signed mode only).
    Ca,
}

impl CertificateKind {
    /// The label value: `serving` or `ca`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CertificateKind::Serving => "serving",
            CertificateKind::Ca => "ca",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    webhook: &'static str,
    operation: &'static str,
    allowed: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConversionLabels {
    from: &'static str,
    to: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccessLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabels {
    certificate: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn admission_histogram() -> Histogram {
    // 100 µs .. ~6.5 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The operation label values (anything else is `other`), in the order of
/// [`AdmissionSeries`].
const OPERATIONS: [&str; 5] = ["other", "CREATE", "UPDATE", "DELETE", "CONNECT"];

/// The admission series by webhook, operation (as [`OPERATIONS`]) and
/// outcome, each shared with its family once recorded.
#[derive(Default)]
struct AdmissionSeries {
    requests: [[[std::sync::OnceLock<Counter>; 2]; OPERATIONS.len()]; 2],
    duration: [std::sync::OnceLock<Histogram>; 2],
}

struct Inner {
    registry: Registry,
    admission_requests: Family<AdmissionLabels, Counter>,
    admission_duration: HistogramFamily<WebhookLabels>,
    /// Each admission series, taken from its family the first time it is
    /// recorded (it appears then, as before) and kept: a request does not
    /// take the family's lock or hash its labels.
    admission_series: AdmissionSeries,
    conversion_objects: Family<ConversionLabels, Counter>,
    reconcile_total: Family<ReconcileLabels, Counter>,
    reconcile_duration: Histogram,
    certificate_expiry: Family<CertificateLabels, Gauge>,
    access_reviews: Family<AccessLabels, Counter>,
    ledger_writes: Family<AccessLabels, Counter>,
    child_watch_starts: Family<KindLabels, Counter>,
    child_watch_errors: Family<KindLabels, Counter>,
    optional_api: Family<KindLabels, Gauge>,
    remembered: Gauge,
}

/// All of infergate's metrics and the registry that renders them.
/// Cheap to clone; every clone records into the same registry.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// An operation string's place in [`OPERATIONS`], its bounded label.
fn operation_index(op: &str) -> usize {
    // Anything not listed is `other`, at index 0.
    OPERATIONS.iter().position(|o| *o == op).unwrap_or(0)
}

/// Map an apiVersion (or bare version) to a bounded label value.
fn version_label(v: &str) -> &'static str {
    match v.rsplit('/').next().unwrap_or(v) {
        "v1alpha1" => "v1alpha1",
        "v1beta1" => "v1beta1",
        "" => "unknown",
        _ => "other",
    }
}

impl Metrics {
    /// A fresh registry with every infergate metric registered.
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let admission_requests = Family::<AdmissionLabels, Counter>::default();
        // prometheus-client appends `_total` to counters.
        registry.register(
            "infergate_admission_requests",
            "Admission requests answered, by webhook, operation and outcome",
            admission_requests.clone(),
        );
        let admission_duration: HistogramFamily<WebhookLabels> =
            Family::new_with_constructor(admission_histogram);
        registry.register(
            "infergate_admission_duration_seconds",
            "Time to answer an admission request, by webhook",
            admission_duration.clone(),
        );
        let conversion_objects = Family::<ConversionLabels, Counter>::default();
        registry.register(
            "infergate_conversion_objects",
            "Objects converted by the conversion webhook, by source and target version and result",
            conversion_objects.clone(),
        );
        let reconcile_total = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "infergate_reconcile",
            "Reconciliations of InferenceServices, by result",
            reconcile_total.clone(),
        );
        // 1 ms .. ~65 s
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 17));
        registry.register(
            "infergate_reconcile_duration_seconds",
            "Time spent reconciling one InferenceService",
            reconcile_duration.clone(),
        );
        let certificate_expiry = Family::<CertificateLabels, Gauge>::default();
        registry.register(
            "infergate_certificate_expiry_timestamp_seconds",
            "Expiry (notAfter) of the certificates in use, as a Unix timestamp",
            certificate_expiry.clone(),
        );
        let access_reviews = Family::<AccessLabels, Counter>::default();
        registry.register(
            "infergate_access_reviews",
            "Access reviews of the Secrets, ConfigMaps and ServiceAccounts service writes reference, by result (cached: answered from the cache)",
            access_reviews.clone(),
        );
        let ledger_writes = Family::<AccessLabels, Counter>::default();
        registry.register(
            "infergate_budget_ledger_writes",
            "Writes of the per-namespace GPU budget ledgers, by result (written, conflict, denied, failed, corrected)",
            ledger_writes.clone(),
        );
        let child_watch_starts = Family::<KindLabels, Counter>::default();
        registry.register(
            "infergate_child_watch_starts",
            "Watches of the reconciler's children started, by kind",
            child_watch_starts.clone(),
        );
        let child_watch_errors = Family::<KindLabels, Counter>::default();
        registry.register(
            "infergate_child_watch_errors",
            "Errors of the watches of the reconciler's children, by kind",
            child_watch_errors.clone(),
        );
        let optional_api = Family::<KindLabels, Gauge>::default();
        registry.register(
            "infergate_optional_api_installed",
            "Whether the optional CRD of a child kind is served (1) or not (0)",
            optional_api.clone(),
        );
        let remembered = Gauge::default();
        registry.register(
            "infergate_reconciler_remembered_entries",
            "Entries the reconciler keeps per service and child beyond its caches (children applied, pending echoes and changes, backoffs, rollout step clocks): back to where it started once the services go",
            remembered.clone(),
        );
        // Start the common series at zero so rates work from the first scrape.
        reconcile_total
            .get_or_create(&ReconcileLabels {
                result: "success".to_owned(),
            })
            .inc_by(0);
        Metrics {
            inner: Arc::new(Inner {
                registry,
                admission_requests,
                admission_duration,
                admission_series: AdmissionSeries::default(),
                conversion_objects,
                reconcile_total,
                reconcile_duration,
                certificate_expiry,
                access_reviews,
                ledger_writes,
                child_watch_starts,
                child_watch_errors,
                optional_api,
                remembered,
            }),
        }
    }

    /// Count `n` access reviews with `result` (`allowed`, `denied`,
    /// `failed`, `timeout` or `cached`).
    pub fn access_reviews(&self, result: &'static str, n: u64) {
        if n == 0 {
            return;
        }
        self.inner
            .access_reviews
            .get_or_create(&AccessLabels { result })
            .inc_by(n);
    }

    /// Count one write (or refusal) of a budget ledger with `result`
    /// (`written`, `conflict`, `denied`, `failed` or `corrected`).
    pub fn ledger_write(&self, result: &'static str) {
        self.inner
            .ledger_writes
            .get_or_create(&AccessLabels { result })
            .inc();
    }

    /// Count one start of the watch of the child kind `kind`.
    pub fn child_watch_started(&self, kind: &'static str) {
        self.inner
            .child_watch_starts
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// Count one error of the watch of the child kind `kind`.
    pub fn child_watch_error(&self, kind: &'static str) {
        self.inner
            .child_watch_errors
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// Record whether the optional CRD of the child kind `kind` is served.
    pub fn optional_api_installed(&self, kind: &'static str, installed: bool) {
        self.inner
            .optional_api
            .get_or_create(&KindLabels { kind })
            .set(i64::from(installed));
    }

    /// Record how many entries the reconciler remembers
    /// ([`crate::reconcile`]'s writer and context).
    pub fn reconciler_remembered(&self, entries: usize) {
        self.inner
            .remembered
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
    }

    /// Record one answered admission request. `operation` is the
    /// AdmissionRequest operation (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`).
    pub fn admission(&self, webhook: Webhook, operation: &str, allowed: bool, elapsed: Duration) {
        let inner = &*self.inner;
        let o = operation_index(operation);
        let operation = OPERATIONS[o];
        // Exhaustive: a new webhook does not build until it has its place.
        let w = match webhook {
            Webhook::Mutate => 0,
            Webhook::Validate => 1,
        };
        inner.admission_series.requests[w][o][usize::from(allowed)]
            .get_or_init(|| {
                inner
                    .admission_requests
                    .get_or_create(&AdmissionLabels {
                        webhook: webhook.as_str(),
                        operation,
                        allowed: if allowed { "true" } else { "false" },
                    })
                    .clone()
            })
            .inc();
        inner.admission_series.duration[w]
            .get_or_init(|| {
                inner
                    .admission_duration
                    .get_or_create(&WebhookLabels {
                        webhook: webhook.as_str(),
                    })
                    .clone()
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Record one object converted (or not) from `from` to `to` (apiVersions or
    /// bare versions; anything but `v1alpha1`/`v1beta1` is counted as `other`).
    pub fn conversion(&self, from: &str, to: &str, success: bool) {
        self.conversions(from, to, success, 1);
    }

    /// Count `n` objects converted from `from` to `to` (one call per
    /// review and version pair, not per object).
    pub fn conversions(&self, from: &str, to: &str, success: bool, n: u64) {
        if n == 0 {
            return;
        }
        self.inner
            .conversion_objects
            .get_or_create(&ConversionLabels {
                from: version_label(from),
                to: version_label(to),
                result: if success { "success" } else { "failure" },
            })
            .inc_by(n);
    }

    /// Record one reconciliation. `result` is `success` or a short, bounded
    /// error label (such as the reconciler error's `metric_label()`).
    pub fn reconcile(&self, result: &str, elapsed: Duration) {
        self.inner
            .reconcile_total
            .get_or_create(&ReconcileLabels {
                result: result.to_owned(),
            })
            .inc();
        self.inner.reconcile_duration.observe(elapsed.as_secs_f64());
    }

    /// Set the expiry (notAfter, Unix seconds) of a certificate in use.
    pub fn set_certificate_expiry(&self, certificate: CertificateKind, not_after_unix: i64) {
        self.inner
            .certificate_expiry
            .get_or_create(&CertificateLabels {
                certificate: certificate.as_str(),
            })
            .set(not_after_unix);
    }

    /// Render every metric in the Prometheus text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_contract_metric_is_rendered() {
        let m = Metrics::new();
        m.admission(Webhook::Mutate, "CREATE", true, Duration::from_millis(2));
        m.admission(Webhook::Validate, "UPDATE", false, Duration::from_millis(1));
        m.conversion("infergate.dev/v1alpha1", "infergate.dev/v1beta1", true);
        m.reconcile("success", Duration::from_millis(30));
        m.set_certificate_expiry(CertificateKind::Serving, 1_900_000_000);
        m.child_watch_started("PodMonitor");
        m.child_watch_error("PodMonitor");
        m.optional_api_installed("PodMonitor", true);
        let text = m.encode().unwrap();
        for needle in [
            r#"infergate_admission_requests_total{webhook="mutate",operation="CREATE",allowed="true"} 1"#,
            r#"infergate_admission_requests_total{webhook="validate",operation="UPDATE",allowed="false"} 1"#,
            r#"infergate_admission_duration_seconds_count{webhook="mutate"} 1"#,
            r#"infergate_conversion_objects_total{from="v1alpha1",to="v1beta1",result="success"} 1"#,
            r#"infergate_reconcile_total{result="success"} 1"#,
            "infergate_reconcile_duration_seconds_count 1",
            r#"infergate_certificate_expiry_timestamp_seconds{certificate="serving"} 1900000000"#,
            r#"infergate_child_watch_starts_total{kind="PodMonitor"} 1"#,
            r#"infergate_child_watch_errors_total{kind="PodMonitor"} 1"#,
            r#"infergate_optional_api_installed{kind="PodMonitor"} 1"#,
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }

    /// An admission series appears when first recorded (not before), and
    /// the series kept after that counts into the same family; every
    /// operation keeps its own label.
    #[test]
    fn admission_series_appear_on_first_use_and_keep_counting() {
        let m = Metrics::new();
        assert!(
            !m.encode()
                .unwrap()
                .contains("infergate_admission_requests_total{"),
            "no series before a request"
        );
        for op in ["CREATE", "CREATE", "CREATE", "DELETE", "CONNECT", "other"] {
            m.admission(Webhook::Validate, op, true, Duration::from_millis(1));
        }
        let text = m.encode().unwrap();
        for needle in [
            r#"infergate_admission_requests_total{webhook="validate",operation="CREATE",allowed="true"} 3"#,
            r#"infergate_admission_requests_total{webhook="validate",operation="DELETE",allowed="true"} 1"#,
            r#"infergate_admission_requests_total{webhook="validate",operation="CONNECT",allowed="true"} 1"#,
            r#"infergate_admission_requests_total{webhook="validate",operation="other",allowed="true"} 1"#,
            r#"infergate_admission_duration_seconds_count{webhook="validate"} 6"#,
        ] {
            assert!(text.contains(needle), "missing {needle}\n{text}");
        }
        assert!(!text.contains(r#"webhook="mutate""#), "{text}");
    }

    #[test]
    fn labels_from_input_are_bounded() {
        let m = Metrics::new();
        m.admission(Webhook::Mutate, "EXPLODE", true, Duration::ZERO);
        m.conversion("evil/v9", "", false);
        let text = m.encode().unwrap();
        assert!(text.contains(r#"operation="other""#), "{text}");
        assert!(
            text.contains(r#"from="other",to="unknown",result="failure""#),
            "{text}"
        );
        assert!(!text.contains("EXPLODE"));
    }

    #[test]
    fn clones_share_one_registry() {
        let a = Metrics::new();
        let b = a.clone();
        b.reconcile("error_apply", Duration::from_millis(5));
        assert!(
            a.encode()
                .unwrap()
                .contains(r#"infergate_reconcile_total{result="error_apply"} 1"#)
        );
    }
}
