//! End-to-end, as the cluster's other users see infergate: the tests that
//! act beside it rather than as it (the guarantees of a shared cluster:
//! installing infergate takes nothing from anyone else, and a tenant's spec
//! reaches only what its policies allow; docs/security.md). One control
//! plane, one test at a time (some install and uninstall cluster-wide
//! objects).
//!
//! - [`gitops`]: a GitOps tool that owns a service's manifest re-applies its
//!   copy of a rollout action already acted on, after somebody wrote
//!   another value: nothing is acted on again.
//! - [`install`]: infergate installed as a platform team installs it
//!   (`kubectl apply -k deploy/`, the namespaced component, the Helm
//!   chart's rendering); the cluster admin and an `edit` ServiceAccount
//!   write Deployments, RayServices and RayClusters in namespaces with and
//!   without InferenceServices and (dry run) in `kube-system`: everything
//!   behaves as without infergate, also in the first seconds after the
//!   policies are created, with infergate down and with its CRD deleted.
//! - [`lws`]: LeaderWorkerSets, the workload of a replica that spans nodes:
//!   infergate's token writes one only as infergate builds it (each way out
//!   of its leader's or workers' template denied, and every owner but an
//!   existing service); the admin and an `edit` ServiceAccount write the
//!   very objects denied to it, as without infergate.
//! - [`refresh`]: tenants toggling `infergate.dev/graph-refresh` every
//!   second: ten values in ten seconds fetch at most once more than the
//!   resync; eight services in four namespaces against tarpits fetch no
//!   more often than their backoff allows, and a fifth namespace's new
//!   service gets its graph within 20 s.
//! - [`tenant`]: a team's `edit` ServiceAccount applies services past each
//!   of its namespace's limits (a GPU service without a class, a node
//!   selector or toleration that reaches a pool it may not use, a priority
//!   class it may not use, a rollout query nested past the bound) and is
//!   told which field and why; what the policy allows is admitted.
//! - [`token`]: somebody holding infergate's own ServiceAccount token: a
//!   child of a service that does not exist, Roles and RoleBindings other
//!   than an endpoint picker's, ClusterRoles and ClusterRoleBindings.

#[path = "e2e_citizen/gitops.rs"]
mod gitops;
#[path = "e2e_citizen/install.rs"]
mod install;
#[path = "e2e_citizen/lws.rs"]
mod lws;
#[path = "e2e_citizen/refresh.rs"]
mod refresh;
#[path = "e2e_citizen/tenant.rs"]
mod tenant;
#[path = "e2e_citizen/token.rs"]
mod token;

use crate::support;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{ControlPlane, text};

/// The tests of this binary, one at a time: they install, replace and
/// delete cluster-wide objects (admission policies, webhook registrations,
/// the InferenceService CRD).
pub static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Who writes: the cluster admin, or somebody with a kubeconfig of their
/// own (a ServiceAccount's token).
#[derive(Clone, Debug)]
pub enum Who {
    /// The control plane's admin (`system:masters`).
    Admin,
    /// The user of this kubeconfig, named for messages.
    User(&'static str, PathBuf),
}

impl Who {
    fn name(&self) -> &'static str {
        match self {
            Who::Admin => "the admin",
            Who::User(name, _) => name,
        }
    }

    /// Run kubectl as this user, with `stdin` when given.
    pub fn kubectl(&self, cp: &ControlPlane, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(cp.bin_dir().join("kubectl"));
        let kubeconfig: &Path = match self {
            Who::Admin => cp.kubeconfig(),
            Who::User(_, path) => path,
        };
        cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
        support::run(&mut cmd, stdin.map(str::as_bytes))
    }

    /// Run kubectl as this user and require success, naming `what`.
    pub fn must(&self, cp: &ControlPlane, what: &str, args: &[&str], stdin: Option<&str>) {
        let out = self.kubectl(cp, args, stdin);
        assert!(
            out.status.success(),
            "{} could not {what}: {}",
            self.name(),
            text(&out)
        );
    }
}

/// `kubectl apply` of `yaml` as the admin, server-side, required to succeed.
pub fn apply_yaml(cp: &ControlPlane, yaml: &str) {
    let out = cp.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "platform-team",
            "-f",
            "-",
        ],
        yaml,
    );
    assert!(out.status.success(), "applying: {}", text(&out));
}

/// Remove what an install leaves that confines or calls: the admission
/// policies and the webhook registrations (the next install creates them
/// anew, so its first seconds are seen).
pub fn uninstall_admission(cp: &ControlPlane) {
    for (kind, name) in [
        ("validatingadmissionpolicybinding", "infergate-confine"),
        ("validatingadmissionpolicy", "infergate-confine"),
        (
            "validatingadmissionpolicybinding",
            "infergate-confine-owner",
        ),
        ("validatingadmissionpolicy", "infergate-confine-owner"),
        ("validatingwebhookconfiguration", "infergate"),
        ("mutatingwebhookconfiguration", "infergate"),
    ] {
        let out = cp.kubectl(&["delete", kind, name, "--ignore-not-found"]);
        assert!(
            out.status.success(),
            "deleting {kind} {name}: {}",
            text(&out)
        );
    }
}
