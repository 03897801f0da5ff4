//! `POST /mutate` and `POST /validate`: admission for InferenceService and
//! both policy kinds, on the typed [`Review`] that [`review::decode`]
//! reads from the body; the [`Response`] goes back through
//! [`review::encode`]. Everything here is synchronous and makes no API
//! call: policies, namespace labels and routes come from the watched
//! [`ClusterState`]. The exceptions are asynchronous and come after: a
//! service write that adds a reference to a Secret, a ConfigMap or a
//! ServiceAccount, or that raises its charge in a namespace with a GPU
//! budget, leaves a [`Pending`] that [`Admission::finish`] settles with
//! access reviews ([`crate::webhook::access`]) and then a write of the
//! namespace's ledger ([`crate::state::ledger`]). `/validate` also answers
//! for infergate's own writes of children (another group's objects:
//! [`crate::webhook::confine`]), from the watched services, and reads the
//! controlling service from the API server only when the cache does not
//! confirm the write.

use std::borrow::Cow;
use std::time::Instant;

use kube::core::Status;
use kube::core::admission::Operation;
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use kube::runtime::reflector::ObjectRef;

use crate::api::GROUP;
use crate::api::v1beta1::InferenceService;
use crate::engine::capacity::charge::Charge;
use crate::engine::model_names::Claim;
use crate::engine::references;
use crate::engine::{Context, FieldError, ServerDefaults, Verdict};
use crate::metrics::{Metrics, Webhook};
use crate::state::ledger::{Ledger, Target};
use crate::state::names::{Holder, NamesLedger};
use crate::state::{ClusterState, context};
use crate::telemetry::{Bounded, bounded_message};
use crate::webhook::access::{AccessReviewer, Split};
use crate::webhook::charging;
use crate::webhook::confine::{Needs, Owners};
use crate::webhook::naming;
use crate::webhook::patch;
use crate::webhook::review::{self, Object, Response, Review};

pub use crate::webhook::review::BadReview;

/// Warning added to every request made through the deprecated version.
pub const V1ALPHA1_WARNING: &str =
    "infergate.dev/v1alpha1 InferenceService is deprecated; use infergate.dev/v1beta1";

/// What the admission handlers need.
#[derive(Debug)]
pub struct Admission {
    /// Policies, namespaces, routes.
    pub state: std::sync::Arc<ClusterState>,
    /// Server flag defaults.
    pub server: ServerDefaults,
    /// Metrics.
    pub metrics: Metrics,
    /// Asks the API server whether requesters may use what they reference.
    pub access: AccessReviewer,
    /// The GPU budget ledgers service writes are charged in.
    pub ledger: Ledger,
    /// The names ledgers services routed by name record their names in.
    pub names: NamesLedger,
    /// Asks the API server about a service that controls a child infergate
    /// writes, when the watch cache does not confirm the write.
    pub owners: Owners,
}

/// The answer to one review plus what the trace records.
#[derive(Debug)]
pub struct Answer {
    /// The response to send back (see [`Answer::to_json`]).
    pub response: Response,
    /// Whether the request was allowed.
    pub allowed: bool,
    /// Whether a patch was returned.
    pub mutated: bool,
    /// What is still to be settled: references whose use by the requester
    /// is to be reviewed, a charge to record (the answer is allowed until
    /// [`Admission::finish`] says otherwise).
    pub pending: Option<Pending>,
}

/// A validated service write waiting for its access reviews and its charge.
#[derive(Debug)]
pub struct Pending {
    /// The request without its objects (what a denial names).
    head: Review,
    /// The references to settle: denials the cache knew, and what to ask about.
    refs: Split,
    /// The charge the namespace's ledger must record.
    charge: Option<Charge>,
    /// The names the Gateway's names ledger must record.
    names: Option<Vec<Claim>>,
    /// The uid of the service charged and the generation its write stores.
    uid: Option<String>,
    generation: Option<i64>,
    /// A child write of infergate's own that the cache did not confirm.
    confine: Option<Needs>,
    /// When the request arrived.
    start: Instant,
}

/// Time an answer may take before the API server's 5 s webhook timeout,
/// with a margin for the answer's way back.
const ANSWER_BUDGET: std::time::Duration = std::time::Duration::from_millis(4500);

/// What is left of [`ANSWER_BUDGET`] for the ledger, since `start`.
fn charge_time_left(start: Instant) -> std::time::Duration {
    ANSWER_BUDGET.saturating_sub(start.elapsed())
}

/// What [`Admission::finish`] settles, before the time it started is known.
struct Waiting {
    head: Review,
    refs: Split,
    charge: Option<Charge>,
    names: Option<Vec<Claim>>,
    uid: Option<String>,
    generation: Option<i64>,
    confine: Option<Needs>,
}

impl Answer {
    /// The AdmissionReview to send back ([`review::encode`]).
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        review::encode(&self.response)
    }
}

impl Admission {
    /// Answer a review body for `webhook`: decode, admit, record. `Err`
    /// means the body is not an AdmissionReview at all (HTTP 400).
    pub fn handle(&self, webhook: Webhook, body: &[u8]) -> Result<Answer, BadReview> {
        self.handle_since(webhook, body, Instant::now())
    }

    /// [`Admission::handle`] of a request that arrived at `start` (its
    /// time to answer, and what is left for the ledger, count from then).
    pub fn handle_since(
        &self,
        webhook: Webhook,
        body: &[u8],
        start: Instant,
    ) -> Result<Answer, BadReview> {
        let review = review::decode(body)?;
        let (response, pending) = match webhook {
            Webhook::Mutate => (self.mutate(&review), None),
            Webhook::Validate => self.validate_pending(&review),
        };
        let pending = pending.map(|w| Pending {
            head: w.head,
            refs: w.refs,
            charge: w.charge,
            names: w.names,
            uid: w.uid,
            generation: w.generation,
            confine: w.confine,
            start,
        });
        let answer = Answer {
            allowed: response.allowed,
            mutated: response.patch.is_some(),
            response,
            pending,
        };
        if answer.pending.is_none() {
            self.record(webhook, &review, &answer, start);
        }
        Ok(answer)
    }

    /// Settle an answer's access reviews and charge (a no-op without
    /// any): a reference the requester may not use turns the answer into a
    /// denial naming the field, the object and the verb; then the charge
    /// is recorded in the namespace's ledger, judged again on what the
    /// ledger holds, or the answer is a denial.
    pub async fn finish(&self, mut answer: Answer) -> Answer {
        let Some(pending) = answer.pending.take() else {
            return answer;
        };
        let head = &pending.head;
        if let Some(needs) = &pending.confine {
            if let Err(message) = self.owners.settle(needs).await {
                let allowed = std::mem::take(&mut answer.response);
                answer.response = deny(allowed, 403, "Forbidden", message, &[], head);
                answer.allowed = false;
            }
            self.record(Webhook::Validate, head, &answer, pending.start);
            return answer;
        }
        let mut errors = self
            .access
            .settle(&head.user_info, head.namespace(), pending.refs)
            .await;
        if let Some(mine) = pending.names.filter(|_| errors.is_empty()) {
            let holder = Holder {
                namespace: head.namespace(),
                name: head.name.as_str(),
                uid: pending.uid.as_deref(),
                generation: pending.generation,
            };
            let left = charge_time_left(pending.start);
            let recorded = self.names.record(holder, &mine, left).await;
            errors = naming::errors_of(recorded, &mine);
        }
        if let Some(charge) = pending.charge.filter(|_| errors.is_empty()) {
            let name = head.name.as_str();
            let target = Target {
                namespace: head.namespace(),
                name,
                uid: pending.uid.as_deref(),
                generation: pending.generation,
            };
            let charged = self
                .ledger
                .charge(
                    target,
                    charge,
                    charge_time_left(pending.start),
                    |book| {
                        self.with_context(head, |ctx| charging::judge_in(ctx, name, charge, book))
                    },
                    |services| {
                        self.with_context(head, |ctx| {
                            crate::state::ledger::book::seed(ctx, services)
                        })
                    },
                )
                .await;
            errors = charging::errors_of(charged);
        }
        if !errors.is_empty() {
            let verdict = Verdict {
                errors,
                warnings: Vec::new(),
            };
            let allowed = std::mem::take(&mut answer.response);
            answer.response = verdict_response(head, allowed, &verdict, Vec::new());
            answer.allowed = false;
        }
        self.record(Webhook::Validate, head, &answer, pending.start);
        answer
    }

    fn record(&self, webhook: Webhook, review: &Review, answer: &Answer, start: Instant) {
        let elapsed = start.elapsed();
        let operation = operation_str(&review.operation);
        self.metrics
            .admission(webhook, operation, answer.allowed, elapsed);
        tracing::debug!(
            webhook = webhook.as_str(),
            uid = %Bounded(&review.uid),
            kind = %Bounded(&review.kind.kind),
            namespace = %Bounded(review.namespace()),
            name = %Bounded(&review.name),
            operation,
            dry_run = review.dry_run,
            allowed = answer.allowed,
            mutated = answer.mutated,
            elapsed_us = elapsed.as_micros() as u64,
            "admission"
        );
    }

    /// The mutating webhook: fill in defaults (v1beta1 InferenceService only).
    #[must_use]
    pub fn mutate(&self, review: &Review) -> Response {
        let resp = Response::allow(review);
        if !is_service_write(review) {
            return resp;
        }
        let mut warnings = Vec::new();
        if deprecated_version(review) {
            warnings.push(V1ALPHA1_WARNING.to_owned());
        }
        let Some(object) = review.object.as_ref() else {
            return bad_object(resp, review, "no object in request");
        };
        if review.kind.version != "v1beta1" {
            // Registered for v1beta1 with matchPolicy Equivalent: the API server
            // converts first. A v1alpha1 request reaching here (another
            // registration) cannot be patched in its own version.
            return with_warnings(resp, warnings);
        }
        let svc = match object {
            Object::Service(svc) => svc,
            Object::Invalid(e) => {
                // Mutating admission runs before the API server's schema
                // validation: leave a malformed object untouched so the user
                // gets the schema's field error (the validating webhook, run
                // after the schema, denies anything that still does not decode).
                tracing::debug!(uid = %Bounded(&review.uid), error = %Bounded(&e.to_string()), "object does not decode; not defaulting");
                return with_warnings(resp, warnings);
            }
            _ => return with_warnings(resp, warnings),
        };
        let defaulted = self.with_context(review, |ctx| crate::engine::default_spec(svc, ctx));
        warnings.extend(defaulted.warnings.iter().cloned());
        let patch = match patch::defaulting_patch(svc, &defaulted) {
            Ok(p) => p,
            Err(e) => {
                return deny(
                    resp,
                    500,
                    "InternalError",
                    format!("failed to build patch: {e}"),
                    &[],
                    review,
                );
            }
        };
        let resp = Response {
            patch: (patch.as_slice() != b"[]").then_some(patch),
            ..resp
        };
        with_warnings(resp, warnings)
    }

    /// The validating webhook: every rule of the engine, all errors at
    /// once. References that still need an access review, and a charge the
    /// ledger must record, are denied here (this answer is for callers that
    /// cannot wait: see [`Admission::handle`]).
    #[must_use]
    pub fn validate(&self, review: &Review) -> Response {
        match self.validate_pending(review) {
            (resp, None) => resp,
            (resp, Some(Waiting { head, confine: Some(needs), .. })) => deny(
                resp,
                403,
                "Forbidden",
                needs.denial("its controlling InferenceService needs a lookup this caller cannot wait for; denied"),
                &[],
                &head,
            ),
            (resp, Some(Waiting { head, refs, charge, names, .. })) => {
                let ledger = charge.map(|_| {
                    FieldError::forbidden(
                        charging::FIELD,
                        "the namespace's GPU budget ledger must record this charge, which this caller cannot wait for; denied",
                    )
                });
                let ledger = ledger.into_iter().chain(names.map(|mine| {
                    naming::not_recorded(&mine, "this caller cannot wait for it")
                }));
                let unasked: Vec<FieldError> = refs
                    .ask
                    .iter()
                    .map(|r| {
                        FieldError::forbidden(
                            r.field.clone(),
                            &format!(
                                "{} {:?} needs an access review this caller cannot wait for; denied",
                                r.kind, r.name
                            ),
                        )
                    })
                    .collect();
                let errors = refs.with(unasked).into_iter().chain(ledger).collect();
                let verdict = Verdict {
                    errors,
                    warnings: Vec::new(),
                };
                verdict_response(&head, resp, &verdict, Vec::new())
            }
        }
    }

    /// The validating webhook's answer, and the references whose access
    /// review it waits for (with the request they belong to).
    fn validate_pending(&self, review: &Review) -> (Response, Option<Waiting>) {
        let resp = Response::allow(review);
        if !matches!(review.operation, Operation::Create | Operation::Update) {
            return (resp, None);
        }
        if review.kind.group != GROUP {
            return self.confine(review, resp);
        }
        let Some(object) = review.object.as_ref() else {
            return (bad_object(resp, review, "no object in request"), None);
        };
        let resp = match object {
            Object::Service(_) | Object::ServiceV1alpha1(_) => {
                return self.validate_service(review, resp, object);
            }
            Object::ClusterPolicy(p) => verdict_response(
                review,
                resp,
                &crate::engine::validate_cluster_policy(p),
                Vec::new(),
            ),
            Object::Policy(p) => {
                let verdict = self.with_context(review, |ctx| {
                    crate::engine::validate_namespaced_policy(p, ctx)
                });
                verdict_response(review, resp, &verdict, Vec::new())
            }
            Object::Invalid(e) => {
                let warnings = if deprecated_version(review) {
                    vec![V1ALPHA1_WARNING.to_owned()]
                } else {
                    Vec::new()
                };
                with_warnings(bad_object(resp, review, e), warnings)
            }
            Object::Other | Object::Child(_) => resp,
        };
        (resp, None)
    }

    /// Validate an InferenceService (v1beta1, or v1alpha1 converted) against
    /// the stored one on UPDATE, and against its namespace's GPU budget,
    /// and answer; a valid one that adds references also returns those
    /// still to review, and one that raises its charge the charge.
    fn validate_service(
        &self,
        review: &Review,
        resp: Response,
        object: &Object,
    ) -> (Response, Option<Waiting>) {
        let mut warnings = Vec::new();
        if deprecated_version(review) {
            warnings.push(V1ALPHA1_WARNING.to_owned());
        }
        let svc = match service(object) {
            Ok(s) => s,
            Err(e) => return (with_warnings(bad_object(resp, review, &e), warnings), None),
        };
        let old = match (&review.operation, review.old_object.as_ref()) {
            (Operation::Update, Some(o)) => match service(o) {
                Ok(s) => Some(s),
                Err(e) => return (with_warnings(bad_object(resp, review, &e), warnings), None),
            },
            _ => None,
        };
        let (mut verdict, admit) = self.with_context(review, |ctx| {
            let verdict = crate::engine::validate_service(&svc, old.as_deref(), ctx);
            let admit = verdict.allowed().then(|| {
                let name = review.name.as_str();
                let old = old.as_deref().map(|o| &o.spec);
                charging::admit(ctx, name, &svc.spec, old, review.dry_run, || self.book(ctx))
            });
            (verdict, admit.unwrap_or_default())
        });
        verdict.errors.extend(admit.errors);
        verdict.warnings.extend(admit.warnings);
        let names = if verdict.allowed() {
            naming::admit(
                &self.state,
                &self.names,
                &svc,
                old.as_deref(),
                review.dry_run,
            )
        } else {
            naming::Names::default()
        };
        verdict.errors.extend(names.errors);
        verdict.warnings.extend(names.warnings);
        if !verdict.allowed() {
            return (verdict_response(review, resp, &verdict, warnings), None);
        }
        // Room on the class's pool: said, never denied for.
        verdict
            .warnings
            .extend(super::room::warnings(&self.state, &svc, old.as_deref()));
        // The references this write adds: answers already known first.
        let refs = references::new_references(&svc, old.as_deref());
        let mut refs = if refs.is_empty() {
            Split::default()
        } else {
            self.access
                .from_cache(&review.user_info, review.namespace(), refs)
        };
        if refs.ask.is_empty() {
            // Every answer is known: settled here.
            verdict.errors.append(&mut refs.denied);
        }
        let resp = verdict_response(review, resp, &verdict, warnings);
        if !verdict.allowed()
            || (refs.ask.is_empty() && admit.charge.is_none() && names.record.is_none())
        {
            return (resp, None);
        }
        // A write the cache already denies records no charge, but its
        // other references are still asked about, so that the denial
        // names each one.
        let charge = admit.charge.filter(|_| refs.denied.is_empty());
        let names = names.record.filter(|_| refs.denied.is_empty());
        let waiting = Waiting {
            head: review.head(),
            refs,
            charge,
            names,
            uid: svc.metadata.uid.clone(),
            generation: svc.metadata.generation,
            confine: None,
        };
        (resp, Some(waiting))
    }

    /// The book of `ctx`'s namespace as the watch last saw its ledger;
    /// without one, the book of the services the watch holds there (the
    /// ledger a first charge creates).
    fn book(&self, ctx: &Context<'_>) -> crate::state::ledger::book::Book {
        self.ledger
            .cached(ctx.namespace)
            .unwrap_or_else(|| self.seed(ctx))
    }

    /// The book of the services of `ctx`'s namespace in the watch cache.
    fn seed(&self, ctx: &Context<'_>) -> crate::state::ledger::book::Book {
        let services: Vec<_> = self
            .state
            .services()
            .state()
            .into_iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(ctx.namespace))
            .collect();
        crate::state::ledger::book::seed(ctx, &services)
    }

    /// A write of another group's object: a child of infergate's own
    /// (the API server sends only those, `confine.children.infergate.dev`).
    /// Allowed when the watch cache shows the controlling service allows
    /// it; otherwise asked again of the API server ([`Admission::finish`]),
    /// or denied when there is none to ask.
    fn confine(&self, review: &Review, resp: Response) -> (Response, Option<Waiting>) {
        let child = match review.object.as_ref() {
            Some(Object::Child(child)) => child,
            Some(Object::Invalid(e)) => return (bad_object(resp, review, e), None),
            _ => return (resp, None),
        };
        let namespace = review.namespace();
        let Some(needs) = Needs::of(child, &review.kind.kind, &review.name, namespace) else {
            return (resp, None);
        };
        let (ns, owner) = needs.owner();
        let cached = self.state.services().get(&ObjectRef::new(owner).within(ns));
        match needs.check(cached.as_deref()) {
            Ok(()) => (resp, None),
            Err(reason) if !self.owners.can_ask() => {
                let message = needs.denial(&reason);
                (deny(resp, 403, "Forbidden", message, &[], review), None)
            }
            Err(_) => {
                let waiting = Waiting {
                    head: review.head(),
                    refs: Split::default(),
                    charge: None,
                    names: None,
                    uid: None,
                    generation: None,
                    confine: Some(needs),
                };
                (resp, Some(waiting))
            }
        }
    }

    /// Run `f` with the engine's view of the review's namespace, the
    /// policies and the routes, all from the watch caches.
    fn with_context<T>(&self, review: &Review, f: impl FnOnce(&Context<'_>) -> T) -> T {
        let source = context::Watched {
            state: &self.state,
            server: &self.server,
            reconciling: None,
        };
        crate::state::with_context(&source, review.namespace(), f)
    }
}

/// The review's InferenceService as v1beta1 (a v1alpha1 one converted).
fn service(object: &Object) -> Result<Cow<'_, InferenceService>, String> {
    match object {
        Object::Service(svc) => Ok(Cow::Borrowed(svc)),
        Object::ServiceV1alpha1(old) => crate::api::conversion::to_v1beta1(old)
            .map(Cow::Owned)
            .map_err(|e| e.to_string()),
        Object::Invalid(e) => Err(e.clone()),
        _ => Err("not an InferenceService".to_owned()),
    }
}

/// Allow with the verdict's warnings, or deny with its field errors.
fn verdict_response(
    review: &Review,
    resp: Response,
    verdict: &Verdict,
    mut warnings: Vec<String>,
) -> Response {
    warnings.extend(verdict.warnings.iter().cloned());
    if verdict.allowed() {
        with_warnings(resp, warnings)
    } else {
        // As the API server's own validation words it (apierrors.NewInvalid):
        // kubectl then prints `The KIND "NAME" is invalid:` and every cause.
        let message = format!(
            "{}.{} \"{}\" is invalid: {}",
            Bounded(&review.kind.kind),
            Bounded(&review.kind.group),
            Bounded(&review.name),
            verdict.message()
        );
        with_warnings(
            deny(resp, 422, "Invalid", message, &verdict.errors, review),
            warnings,
        )
    }
}

fn operation_str(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// A denial with HTTP-ish `code`, `message`, and field causes.
fn deny(
    resp: Response,
    code: u16,
    reason: &str,
    message: String,
    causes: &[FieldError],
    review: &Review,
) -> Response {
    Response {
        allowed: false,
        status: Some(Status {
            status: Some(StatusSummary::Failure),
            code,
            message: bounded_message(&message),
            metadata: None,
            reason: reason.to_owned(),
            details: Some(StatusDetails {
                name: Bounded(&review.name).to_string(),
                group: Bounded(&review.kind.group).to_string(),
                kind: Bounded(&review.kind.kind).to_string(),
                uid: String::new(),
                causes: causes
                    .iter()
                    .map(|e| StatusCause {
                        reason: e.reason.as_str().to_owned(),
                        message: e.message.clone(),
                        field: e.field.clone(),
                    })
                    .collect(),
                retry_after_seconds: 0,
            }),
        }),
        ..resp
    }
}

fn with_warnings(mut resp: Response, warnings: Vec<String>) -> Response {
    resp.warnings.extend(warnings);
    resp
}

/// A CREATE or UPDATE of an InferenceService (any version): what `/mutate` defaults.
fn is_service_write(review: &Review) -> bool {
    matches!(review.operation, Operation::Create | Operation::Update)
        && review.kind.group == GROUP
        && review.kind.kind == "InferenceService"
}

/// Whether the user sent the request through the deprecated version.
fn deprecated_version(review: &Review) -> bool {
    let kind = review.request_kind.as_ref().unwrap_or(&review.kind);
    kind.group == GROUP && kind.kind == "InferenceService" && kind.version == "v1alpha1"
}

fn bad_object(resp: Response, review: &Review, e: &str) -> Response {
    deny(
        resp,
        400,
        "BadRequest",
        format!("invalid {} object: {e}", review.kind.kind),
        &[],
        review,
    )
}
