//! `kubectl infergate rollout status|promote|pause|resume|abort NAME`.
//!
//! `rollout status` answers with `kubectl rollout status`'s exit codes: 0
//! when the service is stable (promoted, or no canary rollout), 1 when the
//! rollout rolled back (or the service is missing), 2 when `--timeout`
//! elapsed. Without `-w` it reports where the rollout stands and exits, 0
//! for a rollout still in progress (as `kubectl rollout status
//! --watch=false` does). With `-w` it waits on watch events, never a timer,
//! until the status describes the current generation and the rollout ended.
//!
//! The actions write `infergate.dev/rollout-action: VERB/TOKEN` with a fresh
//! token by server-side apply under the field manager `kubectl-infergate`
//! (GitOps tools keep owning the rest of the object), then wait until
//! `status.rollout.actionsSeen` shows the reconciler acted on it. The apply
//! is not forced: when another field manager (a GitOps tool) owns the
//! annotation, nothing is written and the plugin names that manager and
//! prints the manifest change to make instead; `--force` takes the
//! annotation over.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::client::{Connection, PluginError, Target};
#[cfg(test)]
use super::facts::RolloutFacts;
use super::facts::{ServiceFacts, gather};
use super::status::steps_bar;
use super::term::{Style, Tone};
use super::watch::changes;
use crate::api::rollout::RolloutPhase;
use crate::api::v1beta1::InferenceService;
use crate::api::vocabulary::names::ANNOTATION_ROLLOUT_ACTION as ACTION_ANNOTATION;
use crate::engine::format_gateway_duration;

/// The field manager the actions apply under.
pub const FIELD_MANAGER: &str = "kubectl-infergate";
/// How long an action waits for the reconciler to act on it.
pub const ACT_WAIT: Duration = Duration::from_secs(60);

/// What `rollout` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Wait for the rollout to end (`-w`), or say where it stands.
    Status {
        /// Keep watching until it ends.
        watch: bool,
        /// Give up after this long (exit 2).
        timeout: Option<Duration>,
    },
    /// Write `infergate.dev/rollout-action: VERB/TOKEN` and wait until acted on.
    Act {
        /// What to do.
        verb: Verb,
        /// Take the annotation from another field manager that owns it.
        force: bool,
    },
}

/// A rollout action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `promote`.
    Promote,
    /// `pause`.
    Pause,
    /// `resume`.
    Resume,
    /// `abort`.
    Abort,
}

impl Verb {
    /// The verb as the annotation spells it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Promote => "promote",
            Verb::Pause => "pause",
            Verb::Resume => "resume",
            Verb::Abort => "abort",
        }
    }
}

/// `rollout` options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to connect.
    pub connection: Connection,
    /// The service.
    pub name: String,
    /// What to do.
    pub action: Action,
}

/// Where a service's rollout stands, for the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// No canary rollout: stable at once.
    NoRollout,
    /// Stable (promoted, or never rolled) and the status is current.
    Stable,
    /// Rolled back, and the status is current.
    RolledBack,
    /// Progressing, paused, or a status older than the spec.
    InProgress,
}

impl Standing {
    /// The exit code once it ends (0 stable, 1 rolled back); `None` while
    /// in progress.
    #[must_use]
    pub fn exit_code(self) -> Option<u8> {
        match self {
            Standing::NoRollout | Standing::Stable => Some(0),
            Standing::RolledBack => Some(1),
            Standing::InProgress => None,
        }
    }
}

/// Where `facts`' rollout stands: a status that does not yet describe the
/// current generation (the reconciler has not seen a new spec) is in progress.
#[must_use]
pub fn standing(facts: &ServiceFacts) -> Standing {
    let Some(r) = &facts.rollout else {
        return Standing::NoRollout;
    };
    let current = match (facts.generation, facts.observed_generation) {
        (Some(g), Some(o)) => o >= g,
        (None, _) => true,
        (Some(_), None) => false,
    };
    match (current, r.rollout_phase()) {
        (true, Some(RolloutPhase::Stable)) => Standing::Stable,
        (true, Some(RolloutPhase::RolledBack)) => Standing::RolledBack,
        _ => Standing::InProgress,
    }
}

/// One line: the phase, the steps bar, the weight, the soak left and the
/// last word (`reason: message`).
#[must_use]
pub fn progress_line(facts: &ServiceFacts, style: Style) -> String {
    let Some(r) = &facts.rollout else {
        return format!(
            "{}/{} has no canary rollout (spec.rollout.strategy is not Canary): stable",
            facts.namespace, facts.name
        );
    };
    let phase = r.rollout_phase();
    let tone = match phase {
        Some(RolloutPhase::Stable) => Tone::Good,
        Some(RolloutPhase::RolledBack) => Tone::Bad,
        _ => Tone::Wait,
    };
    let mut line = format!(
        "{}  {}",
        style.paint(tone, &format!("{:<11}", r.phase)),
        steps_bar(r.step, &r.steps, &r.phase)
    );
    if let Some(w) = r.weight
        && matches!(
            phase,
            Some(RolloutPhase::Progressing | RolloutPhase::Paused)
        )
    {
        let _ = write!(line, "  weight {w}");
    }
    if let Some(left) = r.soak_left_seconds {
        let left = u64::try_from(left).unwrap_or(0);
        let _ = write!(
            line,
            ", soak {} left",
            format_gateway_duration(Duration::from_secs(left))
        );
    }
    if standing(facts) == Standing::InProgress
        && !matches!(
            phase,
            Some(RolloutPhase::Progressing | RolloutPhase::Paused)
        )
    {
        let _ = write!(
            line,
            "  (waiting for the reconciler to observe generation {})",
            facts.generation.unwrap_or_default()
        );
    } else if let Some(v) = &r.verdict {
        let _ = write!(line, "  {}", v.replace(['\n', '\r'], " "));
    }
    line.chars()
        .filter(|c| *c == '\x1b' || !c.is_control())
        .collect()
}

/// The non-watch report: a headline and the steps bar.
#[must_use]
pub fn report(facts: &ServiceFacts, style: Style) -> String {
    let who = format!("{}/{}", facts.namespace, facts.name);
    let Some(r) = &facts.rollout else {
        return format!(
            "{who} has no canary rollout (spec.rollout.strategy is not Canary): it is stable\n"
        );
    };
    let mut out = match standing(facts) {
        Standing::Stable | Standing::NoRollout => {
            format!("{who}: {} is stable", version(r.stable.as_ref()))
        }
        Standing::RolledBack => format!(
            "{who}: the rollout of {} {}",
            version(r.target.as_ref()),
            style.paint(Tone::Bad, "rolled back")
        ),
        Standing::InProgress => match (r.rollout_phase(), r.step) {
            (Some(phase @ (RolloutPhase::Progressing | RolloutPhase::Paused)), Some(step)) => {
                format!(
                    "{who}: {} {} (stable {}), {}",
                    version(r.target.as_ref()),
                    if phase == RolloutPhase::Paused {
                        "paused"
                    } else {
                        "rolling out"
                    },
                    version(r.stable.as_ref()),
                    match usize::try_from(step) {
                        Ok(i) if i < r.steps.len() =>
                            format!("step {} of {}", i + 1, r.steps.len()),
                        _ => "promoting".to_owned(),
                    }
                )
            }
            _ => format!(
                "{who}: waiting for the reconciler to observe generation {}",
                facts.generation.unwrap_or_default()
            ),
        },
    };
    out.push('\n');
    let _ = writeln!(out, "{}", progress_line(facts, style));
    out
}

fn version(v: Option<&String>) -> String {
    v.cloned().unwrap_or_else(|| "-".to_owned())
}

/// A fresh action token: the time in nanoseconds, a counter and the
/// process id, in base 36 (lowercase letters and digits).
#[must_use]
pub fn fresh_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = u128::from(COUNTER.fetch_add(1, Ordering::Relaxed));
    let pid = u128::from(std::process::id());
    format!("{}{}", base36(nanos + n), base36(pid % 1296 + 1296))
}

fn base36(mut n: u128) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[usize::try_from(n % 36).unwrap_or(0)]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// The server-side apply patch of an action: only the annotation.
#[must_use]
pub fn action_patch(name: &str, value: &str) -> serde_json::Value {
    json!({
        "apiVersion": "infergate.dev/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "annotations": {ACTION_ANNOTATION: value}},
    })
}

/// The field managers other than the plugin that own the action
/// annotation of `svc`, with their operation (`Apply` or `Update`).
#[must_use]
pub fn annotation_owners(svc: &InferenceService) -> Vec<(String, String)> {
    let pointer = format!(
        "/f:metadata/f:annotations/f:{}",
        ACTION_ANNOTATION.replace('~', "~0").replace('/', "~1")
    );
    svc.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() != Some(FIELD_MANAGER))
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer(&pointer).is_some())
        })
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// What to do instead when `owners` (field managers, with their
/// operation) own the annotation: the change to make in the manifest they
/// apply, or `--force`.
#[must_use]
pub fn owned_elsewhere(
    namespace: &str,
    name: &str,
    verb: Verb,
    value: &str,
    owners: &[(String, String)],
) -> String {
    let who = if owners.is_empty() {
        "another field manager".to_owned()
    } else {
        owners
            .iter()
            .map(|(m, op)| format!("{m:?} ({op})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{ACTION_ANNOTATION} of {namespace}/{name} is managed by {who}, not by {FIELD_MANAGER}: nothing was written.\n\
         Set it where that manager's copy of the service comes from (its manifest in Git), with a value not used before:\n\
         \n\
         metadata:\n  annotations:\n    {ACTION_ANNOTATION}: {value}\n\
         \n\
         or take the annotation over: kubectl infergate rollout {} {name} -n {namespace} --force\n\
         (infergate acts on each value once: when the manager applies a value it acted on before, nothing happens.)\n",
        verb.as_str()
    )
}

/// Run `rollout`.
pub async fn run(opts: Options) -> ExitCode {
    let result = match opts.action {
        Action::Status { watch, timeout } => status(&opts, watch, timeout).await,
        Action::Act { verb, force } => act(&opts, verb, force).await,
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn status(opts: &Options, watch: bool, timeout: Option<Duration>) -> Result<u8, PluginError> {
    let target = opts.connection.connect().await?;
    let style = Style::detect();
    if !watch {
        let facts = gather(&target, &opts.name).await?;
        print!("{}", report(&facts, style));
        return Ok(standing(&facts).exit_code().unwrap_or(0));
    }
    let wait = follow(&target, &opts.name, style);
    let outcome = match timeout {
        Some(t) => tokio::time::timeout(t, wait).await.ok(),
        None => Some(wait.await),
    };
    match outcome {
        Some(r) => r,
        None => {
            if style.redraw {
                println!();
            }
            eprintln!(
                "error: timed out waiting for the rollout of {}/{} after {}",
                target.namespace,
                opts.name,
                format_gateway_duration(timeout.unwrap_or_default())
            );
            Ok(2)
        }
    }
}

/// Follow the rollout on watch events until it ends: the exit code.
async fn follow(target: &Target, name: &str, style: Style) -> Result<u8, PluginError> {
    let mut events = std::pin::pin!(changes(target, name));
    let mut last = String::new();
    while events.next().await.is_some() {
        while let Ok(Some(())) =
            tokio::time::timeout(Duration::from_millis(50), events.next()).await
        {}
        let facts = gather(target, name).await?;
        let line = progress_line(&facts, style);
        let end = standing(&facts).exit_code();
        if line != last {
            if style.redraw {
                print!("\r\x1b[2K{line}");
                if end.is_some() {
                    println!();
                }
                use std::io::Write as _;
                let _ = std::io::stdout().flush();
            } else {
                println!("{line}");
            }
            last = line;
        } else if end.is_some() && style.redraw {
            println!();
        }
        if let Some(code) = end {
            return Ok(code);
        }
    }
    Err(PluginError::Other("the watch ended".into()))
}

async fn act(opts: &Options, verb: Verb, force: bool) -> Result<u8, PluginError> {
    let target = opts.connection.connect().await?;
    let facts = gather(&target, &opts.name).await?;
    if facts.rollout.is_none() {
        return Err(PluginError::Other(format!(
            "{}/{} has no canary rollout (spec.rollout.strategy is not Canary): nothing to {}",
            facts.namespace,
            facts.name,
            verb.as_str()
        )));
    }
    let value = format!("{}/{}", verb.as_str(), fresh_token());
    let api = Api::<InferenceService>::namespaced(target.client.clone(), &target.namespace);
    // Not forced: an annotation another manager (a GitOps tool) owns is
    // theirs to change, unless the user says otherwise.
    let params = if force {
        PatchParams::apply(FIELD_MANAGER).force()
    } else {
        PatchParams::apply(FIELD_MANAGER)
    };
    match api
        .patch(
            &opts.name,
            &params,
            &Patch::Apply(action_patch(&opts.name, &value)),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 && !force => {
            let owners = match api.get_opt(&opts.name).await {
                Ok(Some(svc)) => annotation_owners(&svc),
                _ => Vec::new(),
            };
            eprintln!("error: {}", s.message);
            print!(
                "{}",
                owned_elsewhere(&target.namespace, &opts.name, verb, &value, &owners)
            );
            return Ok(1);
        }
        Err(e) => return Err(e.into()),
    }
    println!("{ACTION_ANNOTATION}: {value} written");
    let wait = async {
        let mut events = std::pin::pin!(changes(&target, &opts.name));
        while events.next().await.is_some() {
            let acted = api.get_opt(&opts.name).await?.is_some_and(|svc| {
                svc.status.and_then(|s| s.rollout).is_some_and(|r| {
                    r.actions_seen.contains(&value) || r.last_action == Some(value.clone())
                })
            });
            if acted {
                return gather(&target, &opts.name).await;
            }
        }
        Err(PluginError::Other("the watch ended".into()))
    };
    match tokio::time::timeout(ACT_WAIT, wait).await {
        Ok(Ok(facts)) => {
            println!("{value} acted on");
            println!("{}", progress_line(&facts, Style::detect()));
            Ok(0)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(PluginError::Other(format!(
            "{value} was not acted on within {}: is infergate's reconciler running (and allowed to update {}/{})?",
            format_gateway_duration(ACT_WAIT),
            target.namespace,
            opts.name
        ))),
    }
}

/// A rollout's facts, for tests.
#[cfg(test)]
fn facts_with(rollout: Option<RolloutFacts>, generation: i64, observed: i64) -> ServiceFacts {
    ServiceFacts {
        namespace: "team".into(),
        name: "chat".into(),
        generation: Some(generation),
        observed_generation: Some(observed),
        rollout,
        ..ServiceFacts::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progressing() -> RolloutFacts {
        RolloutFacts {
            phase: "Progressing".into(),
            steps: vec![10, 30, 60],
            step: Some(1),
            weight: Some(30),
            interval: "1m".into(),
            soak_left_seconds: Some(42),
            stable: Some("v1".into()),
            target: Some("v2".into()),
            verdict: Some("StepHeld: soaking".into()),
            ..RolloutFacts::default()
        }
    }

    fn with_phase(phase: &str) -> RolloutFacts {
        RolloutFacts {
            phase: phase.into(),
            step: None,
            weight: None,
            soak_left_seconds: None,
            ..progressing()
        }
    }

    #[test]
    fn exit_codes_follow_kubectl_rollout_status() {
        let f = |r, g, o| standing(&facts_with(r, g, o)).exit_code();
        assert_eq!(f(None, 1, 1), Some(0));
        assert_eq!(f(Some(with_phase("Stable")), 2, 2), Some(0));
        assert_eq!(f(Some(with_phase("RolledBack")), 2, 2), Some(1));
        assert_eq!(f(Some(progressing()), 2, 2), None);
        assert_eq!(f(Some(with_phase("Paused")), 2, 2), None);
        // A status older than the spec is not the end of the new rollout.
        assert_eq!(f(Some(with_phase("Stable")), 3, 2), None);
        assert_eq!(f(Some(with_phase("RolledBack")), 3, 2), None);
    }

    #[test]
    fn the_progress_line_shows_steps_weight_and_soak() {
        let line = progress_line(&facts_with(Some(progressing()), 2, 2), Style::PLAIN);
        assert_eq!(
            line,
            "Progressing  [x] 10  [>] 30  [ ] 60  [ ] 100  weight 30, soak 42s left  StepHeld: soaking"
        );
        let stale = progress_line(&facts_with(Some(with_phase("Stable")), 3, 2), Style::PLAIN);
        assert!(
            stale.ends_with("(waiting for the reconciler to observe generation 3)"),
            "{stale}"
        );
        let none = progress_line(&facts_with(None, 1, 1), Style::PLAIN);
        assert!(none.contains("no canary rollout"), "{none}");
    }

    #[test]
    fn the_progress_line_has_no_control_characters_on_a_pipe() {
        let mut r = progressing();
        r.verdict = Some("a\nb\tc".into());
        let line = progress_line(&facts_with(Some(r), 1, 1), Style::PLAIN);
        assert!(!line.chars().any(char::is_control), "{line:?}");
        let coloured = progress_line(
            &facts_with(Some(progressing()), 1, 1),
            Style {
                colour: true,
                redraw: true,
            },
        );
        assert!(coloured.contains("\x1b[33m"), "{coloured:?}");
    }

    #[test]
    fn the_report_says_where_it_stands() {
        let r = report(&facts_with(Some(progressing()), 2, 2), Style::PLAIN);
        assert!(
            r.starts_with("team/chat: v2 rolling out (stable v1), step 2 of 3\n"),
            "{r}"
        );
        let r = report(
            &facts_with(Some(with_phase("RolledBack")), 2, 2),
            Style::PLAIN,
        );
        assert!(
            r.starts_with("team/chat: the rollout of v2 rolled back\n"),
            "{r}"
        );
        let r = report(&facts_with(None, 1, 1), Style::PLAIN);
        assert!(r.contains("it is stable"), "{r}");
    }

    #[test]
    fn tokens_are_fresh_lowercase_base36() {
        let a = fresh_token();
        let b = fresh_token();
        assert_ne!(a, b);
        for t in [&a, &b] {
            assert!(t.len() >= 8, "{t}");
            assert!(
                t.chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()),
                "{t}"
            );
        }
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
    }

    #[test]
    fn another_managers_annotation_is_named_with_the_manifest_change() {
        let svc: InferenceService = serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "team", "managedFields": [
                {"manager": "kubectl-infergate", "operation": "Apply",
                 "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:infergate.dev/rollout-action": {}}}}},
                {"manager": "flux", "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:infergate.dev/rollout-action": {}}},
                              "f:spec": {"f:model": {}}}},
                {"manager": "kubectl-edit", "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:replicas": {}}}}
            ]},
            "spec": {"model": {"ref": "v1"}}
        }))
        .expect("service");
        let owners = annotation_owners(&svc);
        assert_eq!(owners, [("flux".to_owned(), "Apply".to_owned())]);
        let text = owned_elsewhere("team", "chat", Verb::Pause, "pause/abc", &owners);
        assert!(
            text.starts_with(
                "infergate.dev/rollout-action of team/chat is managed by \"flux\" (Apply), not by kubectl-infergate: nothing was written.\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "\nmetadata:\n  annotations:\n    infergate.dev/rollout-action: pause/abc\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("kubectl infergate rollout pause chat -n team --force"),
            "{text}"
        );
        // The manifest snippet is YAML that says what the text says.
        let yaml = text.split("\n\n").nth(1).expect("the snippet");
        let v: serde_json::Value = serde_saphyr::from_str(yaml).expect("YAML");
        assert_eq!(
            v["metadata"]["annotations"]["infergate.dev/rollout-action"],
            "pause/abc"
        );
    }

    #[test]
    fn the_patch_holds_only_the_annotation() {
        let p = action_patch("chat", "promote/abc");
        assert_eq!(
            p,
            json!({"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                   "metadata": {"name": "chat",
                                "annotations": {"infergate.dev/rollout-action": "promote/abc"}}})
        );
    }
}
