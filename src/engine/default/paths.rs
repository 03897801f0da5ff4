//! The paths of the fields defaulting fills, as a tree mirroring the spec:
//! each group's function is handed its own branch by its caller.
//! Provenance keeps a field as `&'static str` (the annotation's keys and
//! the patch's paths), so the tree is built once, at compile time.

/// `spec`.
pub(super) struct Spec {
    pub(super) engine: Engine,
    pub(super) backend: &'static str,
    pub(super) replicas: &'static str,
    pub(super) autoscaling: Autoscaling,
    pub(super) resources: CpuMemory,
    pub(super) accelerator: Accelerator,
    pub(super) parallelism: Parallelism,
    pub(super) placement: Placement,
    pub(super) health_check: HealthCheck,
    pub(super) metrics: Metrics,
    pub(super) routing: Routing,
    pub(super) rollout: &'static str,
}

/// `spec.engine`.
pub(super) struct Engine {
    pub(super) image: &'static str,
    pub(super) port: &'static str,
    pub(super) shm_size: &'static str,
    pub(super) gpu_memory_utilization: &'static str,
    pub(super) max_model_len: &'static str,
}

/// `spec.autoscaling`.
pub(super) struct Autoscaling {
    pub(super) target_cpu_utilization_percent: &'static str,
}

/// `cpu` and `memory` (of `spec.resources`, of a picker's requests or limits).
pub(super) struct CpuMemory {
    pub(super) cpu: &'static str,
    pub(super) memory: &'static str,
}

/// `spec.accelerator`.
pub(super) struct Accelerator {
    pub(super) class: &'static str,
    pub(super) r#type: &'static str,
}

/// `spec.parallelism`.
pub(super) struct Parallelism {
    pub(super) tensor: &'static str,
    pub(super) pipeline: &'static str,
}

/// `spec.placement`.
pub(super) struct Placement {
    pub(super) node_selector: &'static str,
    pub(super) tolerations: &'static str,
    pub(super) priority_class_name: &'static str,
    pub(super) spread_across: &'static str,
}

/// `spec.healthCheck`.
pub(super) struct HealthCheck {
    pub(super) path: &'static str,
    pub(super) interval: &'static str,
    pub(super) timeout: &'static str,
}

/// `spec.metrics`.
pub(super) struct Metrics {
    pub(super) port: &'static str,
    pub(super) path: &'static str,
    pub(super) interval: &'static str,
}

/// `spec.routing`.
pub(super) struct Routing {
    pub(super) path_template: &'static str,
    pub(super) request_timeout: &'static str,
    pub(super) gateway: &'static str,
    pub(super) backend_kind: &'static str,
    pub(super) endpoint_picker: Picker,
}

/// `spec.routing.endpointPicker`.
pub(super) struct Picker {
    pub(super) mode: &'static str,
    pub(super) image: &'static str,
    pub(super) replicas: &'static str,
    pub(super) failure_mode: &'static str,
    pub(super) config: &'static str,
    pub(super) requests: CpuMemory,
    pub(super) limits: CpuMemory,
}

/// Every path defaulting fills.
pub(super) const SPEC: Spec = Spec {
    engine: Engine {
        image: "spec.engine.image",
        port: "spec.engine.port",
        shm_size: "spec.engine.shmSize",
        gpu_memory_utilization: "spec.engine.gpuMemoryUtilization",
        max_model_len: "spec.engine.maxModelLen",
    },
    backend: "spec.backend",
    replicas: "spec.replicas",
    autoscaling: Autoscaling {
        target_cpu_utilization_percent: "spec.autoscaling.targetCPUUtilizationPercent",
    },
    resources: CpuMemory {
        cpu: "spec.resources.cpu",
        memory: "spec.resources.memory",
    },
    accelerator: Accelerator {
        class: "spec.accelerator.class",
        r#type: "spec.accelerator.type",
    },
    parallelism: Parallelism {
        tensor: "spec.parallelism.tensor",
        pipeline: "spec.parallelism.pipeline",
    },
    placement: Placement {
        node_selector: "spec.placement.nodeSelector",
        tolerations: "spec.placement.tolerations",
        priority_class_name: "spec.placement.priorityClassName",
        spread_across: "spec.placement.spreadAcross",
    },
    health_check: HealthCheck {
        path: "spec.healthCheck.path",
        interval: "spec.healthCheck.interval",
        timeout: "spec.healthCheck.timeout",
    },
    metrics: Metrics {
        port: "spec.metrics.port",
        path: "spec.metrics.path",
        interval: "spec.metrics.interval",
    },
    routing: Routing {
        path_template: "spec.routing.pathTemplate",
        request_timeout: "spec.routing.requestTimeout",
        gateway: "spec.routing.gateway",
        backend_kind: "spec.routing.backendKind",
        endpoint_picker: Picker {
            mode: "spec.routing.endpointPicker.mode",
            image: "spec.routing.endpointPicker.image",
            replicas: "spec.routing.endpointPicker.replicas",
            failure_mode: "spec.routing.endpointPicker.failureMode",
            config: "spec.routing.endpointPicker.config",
            requests: CpuMemory {
                cpu: "spec.routing.endpointPicker.resources.requests.cpu",
                memory: "spec.routing.endpointPicker.resources.requests.memory",
            },
            limits: CpuMemory {
                cpu: "spec.routing.endpointPicker.resources.limits.cpu",
                memory: "spec.routing.endpointPicker.resources.limits.memory",
            },
        },
    },
    rollout: "spec.rollout",
};
