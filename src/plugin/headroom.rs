//! A namespace's GPU and cost budget: the strictest applicable
//! `limits.maxGPUsPerNamespace` / `maxCostPerHourPerNamespace`, what each
//! service charges (its `status.capacity`), and what is left.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::ListParams;
use serde::Serialize;

use super::client::PluginError;
use crate::api::policy::{ClusterInferencePolicy, InferencePolicy};
use crate::api::v1beta1::InferenceService;
use crate::engine::capacity::budget::budget_of;
use crate::engine::capacity::charge::{decimal, money};
use crate::engine::policy::layers;
use crate::engine::{AcceleratorClasses, Context, ModelProfiles, NoRoutes, PolicySnapshot};

/// One service's charge.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceCharge {
    /// The service.
    pub name: String,
    /// `status.capacity.maxGPUs`.
    pub gpus: i64,
    /// `status.capacity.costPerHour`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_hour: Option<String>,
}

/// A namespace's budget and its use.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceBudget {
    /// The namespace.
    pub namespace: String,
    /// The GPU budget, when a policy sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_gpus: Option<i64>,
    /// The cost budget per hour, when a policy sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_per_hour: Option<String>,
    /// GPUs charged by the services.
    pub used_gpus: i64,
    /// Cost per hour charged by the services (those with a price).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_cost_per_hour: Option<String>,
    /// Each service's charge, in name order.
    pub services: Vec<ServiceCharge>,
}

impl NamespaceBudget {
    /// GPUs left under the budget (negative when over), when one is set.
    #[must_use]
    pub fn gpus_left(&self) -> Option<i64> {
        self.max_gpus.map(|m| m - self.used_gpus)
    }
}

/// The budget of `namespace` as the policies of the cluster set it, and
/// the charges of its services.
pub async fn namespace_budget(
    client: &kube::Client,
    namespace: &str,
) -> Result<NamespaceBudget, PluginError> {
    let lp = ListParams::default();
    let cluster = Api::<ClusterInferencePolicy>::all(client.clone())
        .list(&lp)
        .await?
        .items;
    let namespaced = Api::<InferencePolicy>::namespaced(client.clone(), namespace)
        .list(&lp)
        .await?
        .items;
    let labels: BTreeMap<String, String> = match Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await
    {
        Ok(ns) => ns.and_then(|n| n.metadata.labels).unwrap_or_default(),
        // Reading namespaces may be forbidden to a tenant: policies with a
        // namespaceSelector then match as for an unlabelled namespace.
        Err(kube::Error::Api(s)) if s.code == 403 => BTreeMap::new(),
        Err(e) => return Err(e.into()),
    };
    let services = Api::<InferenceService>::namespaced(client.clone(), namespace)
        .list(&lp)
        .await?
        .items;
    let policies = PolicySnapshot {
        cluster,
        namespaced,
    };
    Ok(budget_from(namespace, &labels, &policies, &services))
}

/// [`namespace_budget`] from objects already read.
#[must_use]
pub fn budget_from(
    namespace: &str,
    labels: &BTreeMap<String, String>,
    policies: &PolicySnapshot,
    services: &[InferenceService],
) -> NamespaceBudget {
    let (classes, profiles) = (AcceleratorClasses::new(), ModelProfiles::default());
    let server = crate::engine::ServerDefaults::default();
    let ctx = Context {
        namespace,
        namespace_labels: labels,
        policies,
        classes: &classes,
        profiles: &profiles,
        server: &server,
        routes: &NoRoutes,
    };
    let budget = budget_of(&layers(&ctx));
    let mut charges: Vec<ServiceCharge> = services
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .map(|s| {
            let cap = s.status.as_ref().and_then(|st| st.capacity.as_ref());
            ServiceCharge {
                name: s.metadata.name.clone().unwrap_or_default(),
                gpus: cap.and_then(|c| c.max_gpus).unwrap_or(0),
                cost_per_hour: cap.and_then(|c| c.cost_per_hour.clone()),
            }
        })
        .collect();
    charges.sort_by(|a, b| a.name.cmp(&b.name));
    let used_gpus = charges.iter().map(|c| c.gpus).sum();
    let costs: Vec<_> = charges
        .iter()
        .filter_map(|c| c.cost_per_hour.as_deref().and_then(decimal))
        .collect();
    NamespaceBudget {
        namespace: namespace.to_owned(),
        max_gpus: budget.max_gpus(),
        max_cost_per_hour: budget.max_cost().map(money),
        used_gpus,
        used_cost_per_hour: (!costs.is_empty()).then(|| money(costs.into_iter().sum())),
        services: charges,
    }
}

/// `budget` options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to connect.
    pub connection: super::client::Connection,
    /// Every namespace with services or policies (`-A`), else the one of `connection`.
    pub all_namespaces: bool,
    /// How to print.
    pub output: super::term::Output,
}

/// Run `budget`: 0 when printed and no namespace is over its GPU budget,
/// 1 when one is, 2 when the API server could not be read.
pub async fn run(opts: Options) -> std::process::ExitCode {
    use std::process::ExitCode;
    let budgets = match budgets(&opts).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let text = opts.output.format(&budgets, |b| render(b));
    match text {
        Ok(t) => print!("{t}"),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    if budgets.iter().any(|b| b.gpus_left().is_some_and(|l| l < 0)) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

async fn budgets(opts: &Options) -> Result<Vec<NamespaceBudget>, PluginError> {
    let target = opts.connection.connect().await?;
    if !opts.all_namespaces {
        return Ok(vec![
            namespace_budget(&target.client, &target.namespace).await?,
        ]);
    }
    let lp = ListParams::default();
    let client = &target.client;
    let services = Api::<InferenceService>::all(client.clone())
        .list(&lp)
        .await?
        .items;
    let cluster = Api::<ClusterInferencePolicy>::all(client.clone())
        .list(&lp)
        .await?
        .items;
    let namespaced = Api::<InferencePolicy>::all(client.clone())
        .list(&lp)
        .await?
        .items;
    let labels: BTreeMap<String, BTreeMap<String, String>> =
        match Api::<Namespace>::all(client.clone()).list(&lp).await {
            Ok(l) => l
                .items
                .into_iter()
                .filter_map(|n| Some((n.metadata.name?, n.metadata.labels.unwrap_or_default())))
                .collect(),
            Err(kube::Error::Api(s)) if s.code == 403 => BTreeMap::new(),
            Err(e) => return Err(e.into()),
        };
    let mut by_ns: BTreeMap<String, Vec<InferenceService>> = BTreeMap::new();
    for s in services {
        by_ns
            .entry(s.metadata.namespace.clone().unwrap_or_default())
            .or_default()
            .push(s);
    }
    for p in &namespaced {
        by_ns
            .entry(p.metadata.namespace.clone().unwrap_or_default())
            .or_default();
    }
    let policies = PolicySnapshot {
        cluster,
        namespaced,
    };
    let none = BTreeMap::new();
    Ok(by_ns
        .iter()
        .map(|(ns, svcs)| budget_from(ns, labels.get(ns).unwrap_or(&none), &policies, svcs))
        .collect())
}

/// One block per namespace: the budget, its use, each service's charge.
#[must_use]
pub fn render(budgets: &[NamespaceBudget]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (i, b) in budgets.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let gpus = match (b.max_gpus, b.gpus_left()) {
            (Some(max), Some(left)) if left < 0 => {
                format!("{} of {max} GPUs used, {} over", b.used_gpus, -left)
            }
            (Some(max), Some(left)) => format!("{} of {max} GPUs used, {left} left", b.used_gpus),
            _ => format!("{} GPUs used, no GPU budget", b.used_gpus),
        };
        let cost = match (&b.max_cost_per_hour, &b.used_cost_per_hour) {
            (Some(max), used) => {
                format!("; {} of {max} per hour", used.as_deref().unwrap_or("0.00"))
            }
            (None, Some(used)) => format!("; {used} per hour, no cost budget"),
            (None, None) => String::new(),
        };
        let _ = writeln!(out, "Namespace {}: {gpus}{cost}", b.namespace);
        if b.services.is_empty() {
            let _ = writeln!(out, "  no services");
            continue;
        }
        let width = b
            .services
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(0)
            .max(7);
        let _ = writeln!(out, "  {:<width$}  {:>4}  COST/H", "SERVICE", "GPUS");
        for s in &b.services {
            let _ = writeln!(
                out,
                "  {:<width$}  {:>4}  {}",
                s.name,
                s.gpus,
                s.cost_per_hour.as_deref().unwrap_or("-")
            );
        }
    }
    out
}
