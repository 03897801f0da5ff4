//! Whether every deployment of a graph fits one worker of the group
//! infergate makes for the service: `num_gpus` at most the worker's GPUs,
//! `num_cpus` at most its CPU, `memory` at most its memory (the table in
//! `examples/graphs/README.md`, "Fitting the workers"). Ray schedules a replica on one node; a replica that asks more
//! than any worker has stays pending forever, so it is refused before
//! anything is applied.

use kube_quantity::ParsedQuantity;

use super::proto::ServingGraph;
use crate::api::v1beta1::{AcceleratorType, InferenceService};
use crate::engine::resources::gpus_per_replica;

/// What one worker of the service's worker group offers.
#[derive(Clone, Debug, PartialEq)]
pub struct Worker {
    /// GPUs per worker (`tensor * pipeline` with an accelerator, else 0).
    pub gpus: u32,
    /// How the GPUs come about, for messages.
    pub gpu_detail: String,
    /// CPU cores, when `spec.resources.cpu` sets them (else not limited).
    pub cpus: Option<f64>,
    /// Memory in bytes, when `spec.resources.memory` sets it.
    pub memory_bytes: Option<u64>,
}

impl Worker {
    /// One worker of `svc` (defaulted: policy resources applied).
    #[must_use]
    pub fn of(svc: &InferenceService) -> Self {
        let accelerated = svc
            .spec
            .accelerator
            .as_ref()
            .and_then(|a| a.r#type)
            .is_some_and(|t| t != AcceleratorType::None);
        let gpus = u32::try_from(gpus_per_replica(svc).max(0)).unwrap_or(0);
        let par = svc.spec.parallelism.as_ref();
        let gpu_detail = if accelerated {
            format!(
                "tensor {} x pipeline {}",
                par.and_then(|p| p.tensor).unwrap_or(1),
                par.and_then(|p| p.pipeline).unwrap_or(1)
            )
        } else {
            "no accelerator".to_owned()
        };
        let amount = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
            q.and_then(|q| ParsedQuantity::try_from(q).ok())
                .and_then(|p| p.to_bytes_f64())
        };
        let resources = svc.spec.resources.as_ref();
        Self {
            gpus,
            gpu_detail,
            cpus: amount(resources.and_then(|r| r.cpu.as_ref())),
            memory_bytes: amount(resources.and_then(|r| r.memory.as_ref()))
                .map(|b| b.max(0.0) as u64),
        }
    }
}

/// Every deployment that could never be placed on `worker`, each as
/// `deployment "NAME" asks ... but a worker offers ...`.
pub fn check(graph: &ServingGraph, worker: &Worker) -> Result<(), Vec<String>> {
    let mut found = Vec::new();
    for node in &graph.nodes {
        let Some(o) = node.actor_options.as_ref() else {
            continue;
        };
        let mut asks = Vec::new();
        if let Some(g) = o.num_gpus
            && g > f64::from(worker.gpus)
        {
            asks.push(format!(
                "num_gpus {g} but a worker offers {} GPU(s) ({})",
                worker.gpus, worker.gpu_detail
            ));
        }
        if let (Some(c), Some(have)) = (o.num_cpus, worker.cpus)
            && c > have
        {
            asks.push(format!(
                "num_cpus {c} but a worker offers {have} CPU(s) (spec.resources.cpu)"
            ));
        }
        if let (Some(m), Some(have)) = (o.memory_bytes, worker.memory_bytes)
            && m > have
        {
            asks.push(format!(
                "memory {m} bytes but a worker offers {have} bytes (spec.resources.memory)"
            ));
        }
        if !asks.is_empty() {
            found.push(format!(
                "deployment {:?} asks {}",
                node.name,
                asks.join(", ")
            ));
        }
    }
    if found.is_empty() { Ok(()) } else { Err(found) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1beta1::{AcceleratorSpec, ParallelismSpec, ResourcesSpec};
    use crate::graph::proto::{ActorOptions, Node};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn svc(tensor: i32, cpu: Option<&str>, memory: Option<&str>) -> InferenceService {
        let mut s = InferenceService::new("rag", Default::default());
        s.spec.accelerator = Some(AcceleratorSpec {
            r#type: Some(AcceleratorType::Nvidia),
            class: None,
        });
        s.spec.parallelism = Some(ParallelismSpec {
            tensor: Some(tensor),
            pipeline: Some(1),
        });
        s.spec.resources = Some(ResourcesSpec {
            cpu: cpu.map(|c| Quantity(c.into())),
            memory: memory.map(|m| Quantity(m.into())),
            ..ResourcesSpec::default()
        });
        s
    }

    /// A deployment's name, `num_gpus`, `num_cpus` and `memory_bytes`.
    type Asks<'a> = (&'a str, Option<f64>, Option<f64>, Option<u64>);

    fn graph(options: &[Asks<'_>]) -> ServingGraph {
        ServingGraph {
            name: "g".into(),
            ingress: options[0].0.into(),
            nodes: options
                .iter()
                .map(|(name, gpus, cpus, memory)| Node {
                    name: (*name).into(),
                    actor_options: Some(ActorOptions {
                        num_gpus: *gpus,
                        num_cpus: *cpus,
                        memory_bytes: *memory,
                        ..ActorOptions::default()
                    }),
                    ..Node::default()
                })
                .collect(),
        }
    }

    #[test]
    fn a_deployment_asking_more_than_a_worker_has_is_named_with_both_numbers() {
        let worker = Worker::of(&svc(2, Some("4"), Some("16Gi")));
        assert_eq!(worker.gpus, 2);
        assert_eq!(worker.cpus, Some(4.0));
        assert_eq!(worker.memory_bytes, Some(16 * 1024 * 1024 * 1024));
        let g = graph(&[
            ("router", None, Some(0.5), None),
            ("generator", Some(8.0), Some(8.0), None),
            (
                "embedder",
                Some(0.25),
                Some(1.0),
                Some(32 * 1024 * 1024 * 1024),
            ),
        ]);
        let found = check(&g, &worker).unwrap_err();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            found[0],
            "deployment \"generator\" asks num_gpus 8 but a worker offers 2 GPU(s) (tensor 2 x pipeline 1), num_cpus 8 but a worker offers 4 CPU(s) (spec.resources.cpu)"
        );
        assert!(
            found[1].starts_with("deployment \"embedder\" asks memory 34359738368 bytes"),
            "{}",
            found[1]
        );
        // What fits: fractions of a GPU, exactly the CPU, no limits set.
        let fits = graph(&[
            ("a", Some(2.0), Some(4.0), None),
            ("b", Some(0.5), None, None),
        ]);
        assert!(check(&fits, &worker).is_ok());
        // CPU and memory unset: not limited; 8 GPUs hold the generator.
        let unlimited = Worker::of(&svc(8, None, None));
        assert!(check(&g, &unlimited).is_ok());
        let g9 = graph(&[("generator", Some(9.0), Some(64.0), Some(u64::MAX))]);
        assert_eq!(check(&g9, &unlimited).unwrap_err().len(), 1);
    }

    #[test]
    fn millicores_and_no_accelerator() {
        let mut s = svc(1, Some("500m"), None);
        s.spec.accelerator = None;
        let worker = Worker::of(&s);
        assert_eq!((worker.gpus, worker.cpus), (0, Some(0.5)));
        let found = check(&graph(&[("x", Some(1.0), Some(1.0), None)]), &worker).unwrap_err();
        assert!(found[0].contains("0 GPU(s) (no accelerator)"), "{found:?}");
        assert!(
            found[0].contains("num_cpus 1 but a worker offers 0.5 CPU(s)"),
            "{found:?}"
        );
    }
}
