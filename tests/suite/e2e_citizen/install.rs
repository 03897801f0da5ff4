//! Installing infergate takes nothing from anyone else: the admin and an
//! `edit` ServiceAccount write Deployments, RayServices and RayClusters as
//! they would without infergate, whatever the install (`deploy/`, the
//! namespaced component, the Helm chart) and whatever state it is in.

use std::process::Command;
use std::time::{Duration, Instant};

use super::{TURN, Who, apply_yaml, uninstall_admission};
use crate::support::{self, ControlPlane, Hooks, WAIT, text};

const HELM_KUBE_VERSION: &str = "1.36.3";

/// How a platform team installs infergate.
#[derive(Clone, Copy, Debug)]
enum Flavor {
    /// `kubectl apply -k deploy/`.
    Deploy,
    /// `deploy/` with the `deploy/namespaced` component, from an overlay.
    Namespaced,
    /// `helm template` of `charts/infergate`.
    Helm,
}

/// The objects `flavor` installs, as its tool renders them.
fn render(cp: &ControlPlane, flavor: Flavor) -> String {
    let root = support::root();
    let out = match flavor {
        Flavor::Deploy => cp.kubectl(&["kustomize", &root.join("deploy").display().to_string()]),
        Flavor::Namespaced => {
            let dir = tempfile::tempdir().expect("tempdir");
            let rel = support::relative_path(&root.join("deploy"), dir.path());
            std::fs::write(
                dir.path().join("kustomization.yaml"),
                format!(
                    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{rel}]\ncomponents: [{rel}/namespaced]\n"
                ),
            )
            .expect("overlay");
            cp.kubectl(&["kustomize", &dir.path().display().to_string()])
        }
        Flavor::Helm => support::run(
            Command::new(support::go_tool("helm"))
                .args(["template", "infergate"])
                .arg(root.join("charts/infergate"))
                .args(["--namespace", support::SYSTEM_NAMESPACE])
                .args(["--kube-version", HELM_KUBE_VERSION]),
            None,
        ),
    };
    assert!(out.status.success(), "rendering {flavor:?}: {}", text(&out));
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn deployment_yaml(ns: &str, name: &str, extra_labels: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: {name}{extra_labels}}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers: [{{name: web, image: registry.example.com/web:1}}]\n"
    )
}

fn rayservice_yaml(ns: &str, name: &str, version: u32) -> String {
    format!(
        "apiVersion: ray.io/v1\nkind: RayService\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{version: v{version}}}\nspec:\n  rayClusterConfig:\n    headGroupSpec:\n      rayStartParams: {{}}\n      template:\n        spec:\n          containers: [{{name: ray-head, image: registry.example.com/ray:{version}}}]\n"
    )
}

fn raycluster_yaml(ns: &str, name: &str, workers: u32) -> String {
    format!(
        "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  headGroupSpec:\n    rayStartParams: {{}}\n    template:\n      spec:\n        containers: [{{name: ray-head, image: registry.example.com/ray:1}}]\n  workerGroupSpecs:\n    - groupName: workers\n      replicas: {workers}\n      minReplicas: 0\n      maxReplicas: 4\n      rayStartParams: {{}}\n      template:\n        spec:\n          containers: [{{name: ray-worker, image: registry.example.com/ray:1}}]\n"
    )
}

/// `who` creates and updates a Deployment, a RayService and a RayCluster
/// named after `tag` in `ns`: each write succeeds, as it does without
/// infergate (both users hold the rights).
fn writes_as_without_infergate(cp: &ControlPlane, who: &Who, ns: &str, tag: &str) {
    let web = format!("web-{tag}");
    who.must(
        cp,
        &format!("create Deployment {ns}/{web}"),
        &[
            "create",
            "deployment",
            &web,
            "--image=registry.example.com/web:1",
            "-n",
            ns,
        ],
        None,
    );
    who.must(
        cp,
        &format!("scale Deployment {ns}/{web}"),
        &["scale", "deployment", &web, "--replicas=2", "-n", ns],
        None,
    );
    who.must(
        cp,
        &format!("set the image of Deployment {ns}/{web}"),
        &[
            "set",
            "image",
            &format!("deployment/{web}"),
            "web=registry.example.com/web:2",
            "-n",
            ns,
        ],
        None,
    );
    let apply = ["apply", "-f", "-"];
    let (rs, rc) = (format!("rs-{tag}"), format!("rc-{tag}"));
    for version in [1, 2] {
        who.must(
            cp,
            &format!("apply RayService {ns}/{rs} v{version}"),
            &apply,
            Some(&rayservice_yaml(ns, &rs, version)),
        );
        who.must(
            cp,
            &format!("apply RayCluster {ns}/{rc} with {version} workers"),
            &apply,
            Some(&raycluster_yaml(ns, &rc, version)),
        );
    }
}

/// `who`'s dry-run creates in `kube-system` succeed.
fn dry_runs_in_kube_system(cp: &ControlPlane, who: &Who, tag: &str) {
    let ns = "kube-system";
    let dry = ["apply", "--dry-run=server", "-f", "-"];
    for (what, yaml) in [
        ("Deployment", deployment_yaml(ns, &format!("web-{tag}"), "")),
        ("RayService", rayservice_yaml(ns, &format!("rs-{tag}"), 1)),
        ("RayCluster", raycluster_yaml(ns, &format!("rc-{tag}"), 1)),
    ] {
        who.must(
            cp,
            &format!("dry-run a {what} in kube-system"),
            &dry,
            Some(&yaml),
        );
    }
    who.must(
        cp,
        "dry-run kubectl create deployment in kube-system",
        &[
            "create",
            "deployment",
            &format!("web2-{tag}"),
            "--image=registry.example.com/web:1",
            "-n",
            ns,
            "--dry-run=server",
        ],
        None,
    );
}

/// Everyone's writes, everywhere, for the round `round`.
fn everyone_writes(cp: &ControlPlane, users: &[Who], plain: &str, served: &str, round: &str) {
    for (i, who) in users.iter().enumerate() {
        for (ns, place) in [(plain, "plain"), (served, "served")] {
            writes_as_without_infergate(cp, who, ns, &format!("{round}-{place}-{i}"));
        }
        dry_runs_in_kube_system(cp, who, &format!("{round}-{i}"));
        // A Deployment that looks like one of infergate's (its label and a
        // controller reference to an InferenceService) is the admin's or
        // the editor's all the same.
        let name = format!("lookalike-{round}-{i}");
        let mut yaml = deployment_yaml(plain, &name, ", infergate.dev/service: chat");
        yaml = yaml.replacen(
            "  labels:",
            "  ownerReferences: [{apiVersion: infergate.dev/v1beta1, kind: InferenceService, name: chat, uid: 00000000-0000-4000-8000-000000000000, controller: true}]\n  labels:",
            1,
        );
        who.must(
            cp,
            "create a Deployment that looks like infergate's",
            &["apply", "-f", "-"],
            Some(&yaml),
        );
    }
}

/// For `window` after the admission objects are created: writes by both
/// users keep succeeding (nothing waits for a parameter to sync).
fn first_seconds(
    cp: &ControlPlane,
    users: &[Who],
    plain: &str,
    round: &str,
    window: Duration,
) -> usize {
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < window {
        for who in users {
            let name = format!("early-{round}-{n}");
            who.must(
                cp,
                &format!("create Deployment {plain}/{name} right after the install"),
                &["apply", "-f", "-"],
                Some(&deployment_yaml(plain, &name, "")),
            );
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installing_infergate_takes_nothing_from_anyone_else() {
    let _turn = TURN.lock().await;
    support::init_tracing();
    let cp = support::control_plane().await;
    cp.install_crds().await;
    cp.install_crd_file(support::rayservice_crd()).await;
    cp.install_crd_file(support::raycluster_crd()).await;
    cp.ensure_namespace(support::SYSTEM_NAMESPACE).await;
    // The namespaced component's example tenant.
    cp.ensure_namespace("team-a").await;
    let plain = cp.fresh_namespace("citizen-plain").await;
    let served = cp.fresh_namespace("citizen-served").await;

    // An ordinary ServiceAccount with the `edit` role where it works; the
    // cluster lets `edit` write KubeRay's objects (an aggregated role, as
    // a platform that runs KubeRay would add).
    apply_yaml(
        cp,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: citizen-ray-edit\n  labels: {rbac.authorization.k8s.io/aggregate-to-edit: \"true\"}\nrules:\n  - apiGroups: [ray.io]\n    resources: [rayservices, rayclusters]\n    verbs: [get, list, watch, create, update, patch, delete]\n",
    );
    cp.kubectl(&["create", "serviceaccount", "editor", "-n", &plain]);
    for ns in [plain.as_str(), served.as_str(), "kube-system"] {
        let out = cp.kubectl(&[
            "create",
            "rolebinding",
            &format!("editor-{plain}"),
            "--clusterrole=edit",
            &format!("--serviceaccount={plain}:editor"),
            "-n",
            ns,
        ]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let editor = support::service_account_kubeconfig(cp, &plain, "editor").expect("editor token");
    let users = [Who::Admin, Who::User("the edit ServiceAccount", editor)];
    // The aggregated rule reaches `edit` a moment after it is created.
    support::eventually("edit covers RayServices", WAIT, async || {
        let out = users[1].kubectl(
            cp,
            &[
                "auth",
                "can-i",
                "create",
                "rayservices.ray.io",
                "-n",
                &served,
            ],
            None,
        );
        (text(&out).trim() == "yes").then_some(())
    })
    .await;

    // Baseline: without infergate's admission objects.
    uninstall_admission(cp);
    everyone_writes(cp, &users, &plain, &served, "before");

    // infergate's own server, for the InferenceServices of `served`.
    let mut server = support::start_infergate(cp, support::binary(), &[], Hooks::All)
        .await
        .unwrap_or_else(|e| panic!("starting infergate: {e:#}"));

    for flavor in [Flavor::Deploy, Flavor::Namespaced, Flavor::Helm] {
        let round = format!("{flavor:?}").to_lowercase();
        let rendered = render(cp, flavor);
        assert!(
            rendered.contains("name: infergate-confine"),
            "{flavor:?} installs the admission policy"
        );
        uninstall_admission(cp);
        // The test harness points the CRD's conversion at its own server by
        // URL; the install names the in-cluster Service (one of the two).
        support::unregister_conversion(cp)
            .await
            .expect("the CRD's conversion back at its Service");
        apply_yaml(cp, &rendered);
        let n = first_seconds(cp, &users, &plain, &round, Duration::from_secs(5));
        eprintln!("{flavor:?}: {n} writes in the first 5 s after the install, all admitted");

        // infergate serving (its registrations pointed at the test's
        // server), and a namespace that holds InferenceServices.
        support::register_webhooks(cp, server.port, &server.ca_pem)
            .await
            .expect("registering the webhooks");
        support::eventually("the namespace holds a service", WAIT, async || {
            let yaml = support::service_yaml(
                &served,
                "chat",
                "  model: {ref: llama3-8b}\n  engine: {image: registry.example.com/vllm:0.9}\n",
            );
            let out = cp.kubectl_stdin(&["apply", "-f", "-"], &yaml);
            out.status.success().then_some(()).ok_or_else(|| text(&out))
        })
        .await;
        everyone_writes(cp, &users, &plain, &served, &round);
        // The install gives the cluster's `edit` role infergate's services
        // (deploy/user-roles.yaml): the editor writes one of its own.
        support::eventually(
            "the edit ServiceAccount creates a service",
            WAIT,
            async || {
                let yaml = support::service_yaml(
                    &served,
                    &format!("editor-{round}"),
                    "  model: {ref: llama3-8b}\n  engine: {image: registry.example.com/vllm:0.9}\n",
                );
                let out = users[1].kubectl(cp, &["apply", "-f", "-"], Some(&yaml));
                out.status.success().then_some(()).ok_or_else(|| text(&out))
            },
        )
        .await;
    }

    // infergate down: its registrations call nobody, and still nobody else
    // is touched.
    server.child.kill().expect("stopping infergate");
    let _ = server.child.wait();
    everyone_writes(cp, &users, &plain, &served, "down");

    // The InferenceService CRD deleted (the policy's kinds and parameters
    // gone with it): still nobody else is touched.
    let out = cp.kubectl(&[
        "delete",
        "crd",
        "inferenceservices.infergate.dev",
        "--wait=true",
        "--timeout=120s",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    everyone_writes(cp, &users, &plain, &served, "nocrd");

    // Put back what the other tests of this binary use.
    let crds = support::root().join("crds/infergate.dev.yaml");
    let out = cp.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &crds.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    uninstall_admission(cp);
}
