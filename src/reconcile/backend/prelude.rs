//! What both backends do first: default and validate the service (on its
//! own and against the policies, an invalid spec reported in status), and
//! find its AcceleratorClass.

use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::InferenceService;
use crate::engine::{self, PolicySnapshot, Verdict};
use crate::reconcile::context::Ctx;
use crate::reconcile::error::Error;
use crate::reconcile::status::{Observation, Outcome, PolicyResult};
use crate::state::context::Watched;
use crate::state::with_context;

/// What the backends build from, once the service is known to be valid.
pub(super) struct Prelude {
    /// The service, defaulted in memory.
    pub(super) defaulted: InferenceService,
    /// An applicable policy lists the graph URL's host literally.
    pub(super) graph_internal_allowed: bool,
    /// The status so far.
    pub(super) obs: Observation,
    /// The AcceleratorClass the engine pods run on.
    pub(super) class: Option<AcceleratorClassSpec>,
}

/// What both backends do first: default and validate the service (on its
/// own and against the policies) and find its AcceleratorClass. An invalid
/// service, or one whose class is gone, gets its status and no change to
/// its children: `None`.
pub(super) async fn prelude(
    svc: &InferenceService,
    ctx: &Ctx,
    ns: &str,
) -> Result<Option<Prelude>, Error> {
    let Evaluation {
        defaulted,
        intrinsic,
        policy,
        graph_internal_allowed,
        capacity,
    } = evaluate(ctx, svc, ns);
    let mut obs = Observation {
        capacity: Some(capacity),
        ..Observation::before_applying(
            svc.metadata.generation,
            Outcome::Invalid(String::new()),
            policy,
        )
    };
    let class = match defaulted
        .spec
        .accelerator
        .as_ref()
        .and_then(|a| a.class.as_deref())
    {
        None => None,
        Some(name) => match ctx.state.classes().get(name) {
            Some(c) => Some(c.clone()),
            None => {
                obs.outcome = Outcome::AcceleratorClassNotFound(name.to_owned());
                ctx.writer.write_status(svc, &obs).await?;
                return Ok(None);
            }
        },
    };
    if !intrinsic.allowed() {
        obs.outcome = Outcome::Invalid(intrinsic.message());
        ctx.writer.write_status(svc, &obs).await?;
        return Ok(None);
    }
    Ok(Some(Prelude {
        defaulted,
        graph_internal_allowed,
        obs,
        class,
    }))
}

/// The engine's view of one service: defaulted in memory, validated on its
/// own and against the applicable policies.
struct Evaluation {
    defaulted: InferenceService,
    intrinsic: Verdict,
    policy: PolicyResult,
    /// An applicable policy lists the graph URL's host literally.
    graph_internal_allowed: bool,
    /// `status.capacity`.
    capacity: crate::api::v1beta1::CapacityStatus,
}

/// Default and validate (synchronous: the engine's context is not `Send`).
fn evaluate(ctx: &Ctx, svc: &InferenceService, ns: &str) -> Evaluation {
    let source = Watched {
        state: &ctx.state,
        server: &ctx.config.server,
        reconciling: Some(svc),
    };
    with_context(&source, ns, |full_ctx| {
        let defaulted = engine::default_service(svc, full_ctx).object;
        let no_policies = PolicySnapshot::default();
        let bare_ctx = engine::Context {
            policies: &no_policies,
            ..*full_ctx
        };
        // A model that no longer fits its GPUs stops nothing: it is told
        // in PolicyCompliant (NoLongerFits), after any policy violation.
        let intrinsic = engine::validate_running(&defaulted, &bare_ctx);
        let full = engine::validate_running(&defaulted, full_ctx);
        let misfits = engine::misfits(&defaulted, full_ctx);
        let no_longer_fits = (!misfits.is_empty()).then(|| {
            misfits
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        });
        let policy = match (
            policy_result(&intrinsic, &full, &misfits),
            crate::reconcile::accounting::over_budget(full_ctx, &ctx.state, svc),
            no_longer_fits,
        ) {
            (policy, None, None) => policy,
            (PolicyResult::Violation(v), over, fits) => PolicyResult::Violation(
                [Some(v), over, fits.map(|f| format!("no longer fits: {f}"))]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            (_, Some(over), _) => PolicyResult::OverBudget(over),
            (_, None, Some(fits)) => PolicyResult::NoLongerFits(fits),
        };
        let capacity = engine::capacity::sizing::capacity_status(
            &defaulted.spec,
            full_ctx.classes,
            full_ctx.profiles,
            engine::capacity::charge::charge_of(&defaulted.spec, full_ctx.classes),
        );
        let graph_internal_allowed = defaulted
            .spec
            .graph
            .as_ref()
            .and_then(|g| engine::graph_source::parse_graph_url(&g.url).ok())
            .is_some_and(|url| {
                engine::graph_source::host_listed_literally(&engine::policy::layers(full_ctx), &url)
            });
        Evaluation {
            defaulted,
            intrinsic,
            policy,
            graph_internal_allowed,
            capacity,
        }
    })
}

/// Split policy findings from the object's own errors.
fn policy_result(
    intrinsic: &Verdict,
    full: &Verdict,
    misfits: &[engine::FieldError],
) -> PolicyResult {
    let own: Vec<String> = intrinsic.errors.iter().map(ToString::to_string).collect();
    let violations: Vec<String> = full
        .errors
        .iter()
        .map(ToString::to_string)
        .filter(|e| !own.contains(e))
        .collect();
    if !violations.is_empty() {
        return PolicyResult::Violation(violations.join("; "));
    }
    // A misfit is a warning of both (the fit needs no policy) and told
    // apart, as NoLongerFits.
    let misfit = |w: &String| misfits.iter().any(|m| w.starts_with(&m.to_string()));
    let warnings: Vec<&String> = full
        .warnings
        .iter()
        .filter(|w| !intrinsic.warnings.contains(w) && !misfit(w))
        .collect();
    if warnings.is_empty() {
        PolicyResult::Compliant
    } else {
        PolicyResult::Warning(
            warnings
                .iter()
                .map(|w| w.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
}
