//! The paths of the fields defaulting fills, as a tree mirroring the spec:
//! each group's function is handed its own branch by its caller.
//! Provenance keeps a field as `&'static str` (the annotation's keys and
//! the patch's paths), so the tree is built once, at compile time.

/// `spec`.
pub(super) struct SpecPaths {
    pub(super) engine: EnginePaths,
    pub(super) backend: &'static str,
    pub(super) replicas: &'static str,
    pub(super) autoscaling: AutoscalingPaths,
    pub(super) resources: CpuMemoryPaths,
    pub(super) accelerator: AcceleratorPaths,
    pub(super) parallelism: ParallelismPaths,
    pub(super) placement: PlacementPaths,
    pub(super) health_check: HealthCheckPaths,
    pub(super) metrics: MetricsPaths,
    pub(super) routing: RoutingPaths,
    pub(super) rollout: RolloutPaths,
    pub(super) canary_on_full_pool: &'static str,
}

/// `spec.rollout`: the whole block (a policy's plan, added where the
/// service has none), each field of the plan (added to a block that has
/// only full-pool fields), and the full-pool fields.
pub(super) struct RolloutPaths {
    pub(super) block: &'static str,
    pub(super) strategy: &'static str,
    pub(super) steps: &'static str,
    pub(super) interval: &'static str,
    pub(super) progress_deadline: &'static str,
    pub(super) max_restarts: &'static str,
    pub(super) analysis: &'static str,
    pub(super) on_full_pool: &'static str,
    pub(super) max_unavailable: &'static str,
    pub(super) canary_on_full_pool: &'static str,
}

/// `spec.engine`.
pub(super) struct EnginePaths {
    pub(super) image: &'static str,
    pub(super) port: &'static str,
    pub(super) shm_size: &'static str,
    pub(super) gpu_memory_utilization: &'static str,
    pub(super) max_model_len: &'static str,
}

/// `spec.autoscaling`.
pub(super) struct AutoscalingPaths {
    pub(super) target_cpu_utilization_percent: &'static str,
}

/// `cpu` and `memory` (of `spec.resources`, of a picker's requests or limits).
pub(super) struct CpuMemoryPaths {
    pub(super) cpu: &'static str,
    pub(super) memory: &'static str,
}

/// `spec.accelerator`.
pub(super) struct AcceleratorPaths {
    pub(super) class: &'static str,
    pub(super) r#type: &'static str,
}

/// `spec.parallelism`.
pub(super) struct ParallelismPaths {
    pub(super) tensor: &'static str,
    pub(super) pipeline: &'static str,
}

/// `spec.placement`.
pub(super) struct PlacementPaths {
    pub(super) node_selector: &'static str,
    pub(super) tolerations: &'static str,
    pub(super) priority_class_name: &'static str,
    pub(super) spread_across: &'static str,
}

/// `spec.healthCheck`.
pub(super) struct HealthCheckPaths {
    pub(super) path: &'static str,
    pub(super) interval: &'static str,
    pub(super) timeout: &'static str,
}

/// `spec.metrics`.
pub(super) struct MetricsPaths {
    pub(super) port: &'static str,
    pub(super) path: &'static str,
    pub(super) interval: &'static str,
}

/// `spec.routing`.
pub(super) struct RoutingPaths {
    pub(super) path_template: &'static str,
    pub(super) request_timeout: &'static str,
    pub(super) gateway: &'static str,
    pub(super) backend_kind: &'static str,
    pub(super) r#match: &'static str,
    pub(super) model_name_header: &'static str,
    pub(super) endpoint_picker: PickerPaths,
}

/// `spec.routing.endpointPicker`.
pub(super) struct PickerPaths {
    pub(super) mode: &'static str,
    pub(super) image: &'static str,
    pub(super) replicas: &'static str,
    pub(super) failure_mode: &'static str,
    pub(super) config: &'static str,
    pub(super) requests: CpuMemoryPaths,
    pub(super) limits: CpuMemoryPaths,
}

/// Every path defaulting fills.
pub(super) const SPEC: SpecPaths = SpecPaths {
    engine: EnginePaths {
        image: "spec.engine.image",
        port: "spec.engine.port",
        shm_size: "spec.engine.shmSize",
        gpu_memory_utilization: "spec.engine.gpuMemoryUtilization",
        max_model_len: "spec.engine.maxModelLen",
    },
    backend: "spec.backend",
    replicas: "spec.replicas",
    autoscaling: AutoscalingPaths {
        target_cpu_utilization_percent: "spec.autoscaling.targetCPUUtilizationPercent",
    },
    resources: CpuMemoryPaths {
        cpu: "spec.resources.cpu",
        memory: "spec.resources.memory",
    },
    accelerator: AcceleratorPaths {
        class: "spec.accelerator.class",
        r#type: "spec.accelerator.type",
    },
    parallelism: ParallelismPaths {
        tensor: "spec.parallelism.tensor",
        pipeline: "spec.parallelism.pipeline",
    },
    placement: PlacementPaths {
        node_selector: "spec.placement.nodeSelector",
        tolerations: "spec.placement.tolerations",
        priority_class_name: "spec.placement.priorityClassName",
        spread_across: "spec.placement.spreadAcross",
    },
    health_check: HealthCheckPaths {
        path: "spec.healthCheck.path",
        interval: "spec.healthCheck.interval",
        timeout: "spec.healthCheck.timeout",
    },
    metrics: MetricsPaths {
        port: "spec.metrics.port",
        path: "spec.metrics.path",
        interval: "spec.metrics.interval",
    },
    routing: RoutingPaths {
        path_template: "spec.routing.pathTemplate",
        request_timeout: "spec.routing.requestTimeout",
        gateway: "spec.routing.gateway",
        backend_kind: "spec.routing.backendKind",
        r#match: "spec.routing.match",
        model_name_header: "spec.routing.modelNameHeader",
        endpoint_picker: PickerPaths {
            mode: "spec.routing.endpointPicker.mode",
            image: "spec.routing.endpointPicker.image",
            replicas: "spec.routing.endpointPicker.replicas",
            failure_mode: "spec.routing.endpointPicker.failureMode",
            config: "spec.routing.endpointPicker.config",
            requests: CpuMemoryPaths {
                cpu: "spec.routing.endpointPicker.resources.requests.cpu",
                memory: "spec.routing.endpointPicker.resources.requests.memory",
            },
            limits: CpuMemoryPaths {
                cpu: "spec.routing.endpointPicker.resources.limits.cpu",
                memory: "spec.routing.endpointPicker.resources.limits.memory",
            },
        },
    },
    rollout: RolloutPaths {
        block: "spec.rollout",
        strategy: "spec.rollout.strategy",
        steps: "spec.rollout.steps",
        interval: "spec.rollout.interval",
        progress_deadline: "spec.rollout.progressDeadline",
        max_restarts: "spec.rollout.maxRestarts",
        analysis: "spec.rollout.analysis",
        on_full_pool: "spec.rollout.onFullPool",
        max_unavailable: "spec.rollout.maxUnavailable",
        canary_on_full_pool: "spec.rollout.canary.onFullPool",
    },
    canary_on_full_pool: "spec.canary.onFullPool",
};
