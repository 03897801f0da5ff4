//! The real KubeRay operator on the test control plane: built from its Go
//! module at a pinned version by `build-kuberay.sh` (into the cache, once),
//! its upstream CRDs installed, the operator run as a child process watching
//! one namespace.

use std::path::PathBuf;
use std::process::{Child, Command};

use super::control_plane::ControlPlane;
use super::process::{cached_by_script, spawn_logged};

/// The directory holding `bin/ray-operator` and `crd/*.yaml` (built when
/// missing; `INFERGATE_KUBERAY_DIR` names one built elsewhere).
pub fn kuberay_dir() -> PathBuf {
    cached_by_script(
        "INFERGATE_KUBERAY_DIR",
        "build-kuberay.sh",
        &[],
        "it builds the KubeRay operator from its Go module and needs Go and the Go module proxy",
    )
}

/// The running operator; killed when dropped (and with the test binary).
pub struct KubeRay {
    child: Child,
    /// Its log file.
    pub log: PathBuf,
}

impl Drop for KubeRay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ControlPlane {
    /// Install KubeRay's own RayCluster and RayService CRDs (server-side:
    /// they are too large for client-side apply's annotation) and start the
    /// operator watching `namespace`.
    pub fn start_kuberay(&self, namespace: &str) -> KubeRay {
        let dir = kuberay_dir();
        for crd in ["ray.io_rayclusters.yaml", "ray.io_rayservices.yaml"] {
            self.apply_crds(&dir.join("crd").join(crd).display().to_string(), true);
        }
        let log = self.dir().join(format!("kuberay-{namespace}.log"));
        let mut cmd = Command::new(dir.join("bin/ray-operator"));
        cmd.args([
            "--kubeconfig",
            &self.kubeconfig().display().to_string(),
            "--enable-leader-election=false",
            "--metrics-addr=0",
            "--health-probe-bind-address=0",
            "--watch-namespace",
            namespace,
            "--zap-log-level=info",
        ]);
        let child = spawn_logged(cmd, &log).expect("starting ray-operator");
        KubeRay { child, log }
    }
}
