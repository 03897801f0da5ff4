//! AcceleratorClasses the tests share.

use infergate::api::AcceleratorClassSpec;
use serde_json::json;

/// A class of 8-GPU H100 nodes carrying every scheduling constraint a class
/// can (a node selector, a toleration, a required node affinity, a runtime
/// class) and a price per device hour.
pub fn h100() -> AcceleratorClassSpec {
    serde_json::from_value(json!({
        "vendor": "nvidia",
        "memoryPerDevice": "80Gi",
        "devicesPerNode": 8,
        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"}]}
        ]}},
        "runtimeClassName": "nvidia",
        "costPerDeviceHour": "4.10"
    }))
    .expect("class")
}
