//! `kubectl infergate status NAME`: one screen of a service's facts;
//! `-w` redraws on every watch event; `-o json|yaml` prints the facts.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use futures::StreamExt;

use super::client::{Connection, PluginError};
use super::facts::{ServiceFacts, gather};
use super::names::NameRoute;
use super::term::Output;
use super::term::{Style, Tone, tone_of};
use super::watch::changes;
use crate::api::rollout::RolloutPhase;
use crate::engine::format_gateway_duration;

/// `status` options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Where to connect.
    pub connection: Connection,
    /// The service.
    pub name: String,
    /// Redraw on every change.
    pub watch: bool,
    /// How to print.
    pub output: Output,
}

/// Run `status`: 0 when printed, 1 when the service does not exist or the
/// API server cannot be reached.
pub async fn run(opts: Options) -> ExitCode {
    match status(&opts).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn status(opts: &Options) -> Result<(), PluginError> {
    let target = opts.connection.connect().await?;
    let style = Style::detect();
    let print = |facts: &ServiceFacts| -> Result<(), PluginError> {
        let text = print_facts(facts, opts.output, style)?;
        print!(
            "{}{text}",
            if opts.watch { style.frame_start() } else { "" }
        );
        Ok(())
    };
    if !opts.watch {
        return print(&gather(&target, &opts.name).await?);
    }
    let mut events = std::pin::pin!(changes(&target, &opts.name));
    let mut last = None;
    while events.next().await.is_some() {
        // A burst of events (a rollout step writes several objects) draws once.
        while let Ok(Some(())) =
            tokio::time::timeout(Duration::from_millis(50), events.next()).await
        {}
        let facts = gather(&target, &opts.name).await?;
        if last.as_ref() != Some(&facts) {
            print(&facts)?;
            last = Some(facts);
        }
    }
    Ok(())
}

/// The facts as `output` says.
pub fn print_facts(
    facts: &ServiceFacts,
    output: Output,
    style: Style,
) -> Result<String, PluginError> {
    output
        .format(facts, |f| render(f, style))
        .map_err(PluginError::Other)
}

/// The screen: tracks, route, rollout, conditions, capacity, budget, graph.
#[must_use]
pub fn render(f: &ServiceFacts, style: Style) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "InferenceService {}/{} ({} backend, generation {}, observed {})",
        f.namespace,
        f.name,
        f.backend,
        f.generation.map_or("-".to_owned(), |g| g.to_string()),
        f.observed_generation
            .map_or("-".to_owned(), |g| g.to_string()),
    );
    out.push('\n');
    let rows: Vec<[String; 4]> = f
        .tracks
        .iter()
        .map(|t| {
            let ready = format!("{}/{}", t.ready, t.desired);
            let tone = if !t.exists {
                Tone::Wait
            } else if t.ready >= t.desired {
                Tone::Good
            } else {
                Tone::Wait
            };
            [
                t.track.clone(),
                t.model.clone(),
                t.engine_image.clone().unwrap_or_else(|| "-".to_owned()),
                style.paint(tone, &ready),
            ]
        })
        .collect();
    table(&mut out, ["TRACK", "MODEL", "ENGINE", "READY"], &rows);
    out.push('\n');
    match &f.route {
        Some(r) => {
            let backends: Vec<String> = r
                .backends
                .iter()
                .map(|b| format!("{} {}", b.name, b.weight))
                .collect();
            // A route by name alone has no path rule.
            let by_name = f
                .model_names
                .as_ref()
                .is_some_and(|n| n.route_match == "ModelName");
            let _ = writeln!(
                out,
                "Route       {} {} -> {}",
                r.gateway,
                r.path
                    .as_deref()
                    .unwrap_or(if by_name { "(by model name)" } else { "-" }),
                backends.join(", ")
            );
        }
        None => out.push_str("Route       none\n"),
    }
    rollout_lines(&mut out, f, style);
    out.push('\n');
    names_lines(&mut out, f, style);
    let rows: Vec<[String; 4]> = f
        .conditions
        .iter()
        .map(|c| {
            [
                c.type_.clone(),
                style.paint(tone_of(&c.status), &c.status),
                c.reason.clone(),
                c.message.clone(),
            ]
        })
        .collect();
    table(
        &mut out,
        ["CONDITION", "STATUS", "REASON", "MESSAGE"],
        &rows,
    );
    out.push('\n');
    resource_lines(&mut out, f, style);
    out
}

/// The names the service serves and whether each is routed, then a
/// blank line (nothing for a service that names nothing).
fn names_lines(out: &mut String, f: &ServiceFacts, style: Style) {
    let Some(n) = &f.model_names else {
        return;
    };
    let mut head = format!("Names       match {}", n.route_match);
    if n.route_match != "Path" {
        let _ = write!(head, ", header {}", n.header);
    }
    if let Some(g) = &n.gateway {
        let _ = write!(head, ", gateway {g}");
    }
    if !n.hostnames.is_empty() {
        let _ = write!(head, ", hostnames {}", n.hostnames.join(", "));
    }
    out.push_str(&head);
    out.push_str("\n\n");
    let rows: Vec<[String; 3]> = n
        .names
        .iter()
        .map(|name| {
            let serves = name
                .adapter_source
                .as_ref()
                .map_or_else(|| "base model".to_owned(), |s| format!("adapter {s}"));
            let routed = match name.route {
                NameRoute::Routed => style.paint(Tone::Good, "yes"),
                NameRoute::Waiting => {
                    format!("{}: {}", style.paint(Tone::Wait, "waiting"), name.detail)
                }
                NameRoute::PathOnly => format!("by path: {}", name.detail),
                _ => format!("{}: {}", style.paint(Tone::Bad, "no"), name.detail),
            };
            [name.name.clone(), serves, routed]
        })
        .collect();
    table(out, ["MODEL NAME", "SERVES", "ROUTED"], &rows);
    out.push('\n');
}

/// The rollout's lines: its phase, step and soak, the steps, the tracks'
/// models, the gate's verdict and the last action (none without a rollout).
fn rollout_lines(out: &mut String, f: &ServiceFacts, style: Style) {
    if let Some(r) = &f.rollout {
        let phase = r.rollout_phase();
        let tone = match phase {
            Some(RolloutPhase::Stable) => Tone::Good,
            Some(RolloutPhase::RolledBack) => Tone::Bad,
            _ => Tone::Wait,
        };
        let mut line = format!("Rollout     {}", style.paint(tone, &r.phase));
        if let (Some(step), Some(RolloutPhase::Progressing | RolloutPhase::Paused)) =
            (r.step, phase)
        {
            let _ = write!(
                line,
                ", step {} of {}, weight {}",
                step + 1,
                r.steps.len(),
                r.weight.unwrap_or(0)
            );
            if let Some(left) = r.soak_left_seconds {
                let left = u64::try_from(left).unwrap_or(0);
                let _ = write!(
                    line,
                    ", soak {} left of {}",
                    format_gateway_duration(Duration::from_secs(left)),
                    r.interval
                );
            }
        }
        out.push_str(&line);
        out.push('\n');
        let _ = writeln!(out, "            {}", steps_bar(r.step, &r.steps, &r.phase));
        if let (Some(stable), target) = (&r.stable, &r.target) {
            let _ = write!(out, "            stable {stable}");
            if let Some(t) = target
                && phase != Some(RolloutPhase::Stable)
            {
                let _ = write!(out, ", target {t}");
            }
            out.push('\n');
        }
        if let Some(v) = &r.verdict {
            let _ = writeln!(out, "            {v}");
        }
        if let Some(a) = &r.last_action {
            let _ = writeln!(out, "            last action {a}");
        }
    }
}

/// What the service costs and may use: its capacity, its namespace's GPU
/// budget and the serving graph's source.
fn resource_lines(out: &mut String, f: &ServiceFacts, style: Style) {
    if let Some(c) = &f.capacity {
        let mut parts = Vec::new();
        if let Some(g) = c.max_gpus {
            parts.push(match c.gpus_per_replica {
                Some(p) => format!("{g} GPUs at most ({p} per replica)"),
                None => format!("{g} GPUs at most"),
            });
        }
        if let Some(t) = c.kv_cache_tokens {
            parts.push(format!("{t} KV tokens per replica"));
        }
        if let Some(m) = &c.max_concurrency {
            parts.push(format!("{m} full-context requests per replica"));
        }
        if let Some(cost) = &c.cost_per_hour {
            parts.push(format!("{cost}/h"));
        }
        if !parts.is_empty() {
            let _ = writeln!(out, "Capacity    {}", parts.join(", "));
        }
    }
    if let Some(b) = &f.budget {
        let line = match (b.max_gpus, b.gpus_left()) {
            (Some(max), Some(left)) => {
                let tone = if left < 0 { Tone::Bad } else { Tone::Good };
                format!(
                    "{} of {max} GPUs used in {}, {} left",
                    b.used_gpus,
                    b.namespace,
                    style.paint(tone, &left.to_string())
                )
            }
            _ => format!(
                "{} GPUs used in {}, no GPU budget",
                b.used_gpus, b.namespace
            ),
        };
        let _ = writeln!(out, "Budget      {line}");
        if let Some(max) = &b.max_cost_per_hour {
            let _ = writeln!(
                out,
                "            {} of {max}/h",
                b.used_cost_per_hour.as_deref().unwrap_or("0.00")
            );
        }
    }
    if let Some(e) = &f.budget_error {
        let _ = writeln!(out, "Budget      cannot be read: {e}");
    }
    if let Some(g) = &f.graph
        && let Some(d) = &g.short_digest
    {
        let _ = writeln!(
            out,
            "Graph       sha256:{d} from {}",
            g.url.as_deref().unwrap_or("-")
        );
        if let Some(e) = &g.last_fetch_error {
            let _ = writeln!(out, "            last fetch failed: {e}");
        }
    }
}

/// The steps with the current one marked: `[x] 10  [>] 30  [ ] 60  [ ] 100`
/// (100 is the promotion).
#[must_use]
pub fn steps_bar(step: Option<i32>, steps: &[i32], phase: &str) -> String {
    let phase = phase.parse::<RolloutPhase>().ok();
    let current = step.and_then(|s| usize::try_from(s).ok());
    let mut all: Vec<i32> = steps.to_vec();
    all.push(100);
    all.iter()
        .enumerate()
        .map(|(i, w)| {
            let mark = match (phase, current) {
                (Some(RolloutPhase::Stable), _) => "x",
                (Some(RolloutPhase::RolledBack), _) => " ",
                (_, Some(c)) if i < c => "x",
                (_, Some(c)) if i == c => ">",
                _ => " ",
            };
            format!("[{mark}] {w}")
        })
        .collect::<Vec<_>>()
        .join("  ")
}

/// Rows under a header, columns padded to their widest cell (the last
/// column unpadded); widths ignore colour codes.
fn table<const N: usize>(out: &mut String, header: [&str; N], rows: &[[String; N]]) {
    let visible = |s: &str| strip_ansi(s).chars().count();
    let mut widths = header.map(str::len);
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(visible(c));
        }
    }
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            l.push_str(c);
            if i + 1 < N {
                l.push_str(&" ".repeat(widths[i] - visible(c) + 2));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// `s` without ANSI colour codes.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_that_cannot_be_read_is_said_not_left_out() {
        let f = ServiceFacts {
            namespace: "team".into(),
            name: "chat".into(),
            budget_error: Some("clusterinferencepolicies is forbidden".into()),
            ..ServiceFacts::default()
        };
        let screen = render(&f, Style::PLAIN);
        assert!(
            screen.contains("Budget      cannot be read: clusterinferencepolicies is forbidden"),
            "{screen}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&print_facts(&f, Output::Json, Style::PLAIN).expect("json"))
                .expect("parses");
        assert_eq!(json["budgetError"], "clusterinferencepolicies is forbidden");
    }

    #[test]
    fn the_steps_bar_marks_the_current_step() {
        assert_eq!(
            steps_bar(Some(1), &[10, 30], "Progressing"),
            "[x] 10  [>] 30  [ ] 100"
        );
        assert_eq!(steps_bar(None, &[10], "Stable"), "[x] 10  [x] 100");
    }
}
