//! LeaderWorkerSets (the workload of a replica that spans nodes) under the
//! confinement as Deployments are under it.
//!
//! Somebody holding infergate's own ServiceAccount token (`deploy/`'s
//! ServiceAccount, RBAC, admission policy and webhook registrations) may
//! write a LeaderWorkerSet as infergate builds one; the same object with a
//! leader or worker template made privileged, given capabilities, host
//! namespaces, host ports or hostPath volumes, without an owning service,
//! with a label naming another service, under a forged owner or an owner
//! that does not exist, is denied; its scale and status and the
//! StatefulSets LeaderWorkerSet makes are out of its reach. The cluster's
//! other users (the admin, an `edit` ServiceAccount) write the very objects
//! that are denied to infergate, as they would without infergate: before
//! the install, with it serving, and with it down.
//!
//! Only LeaderWorkerSet's CRD is installed (from the directory
//! `build-lws.sh` fills), not its controller or webhooks: admission is all
//! these tests look at.

use std::sync::OnceLock;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use infergate::engine::multi_node::Group;
use infergate::engine::names::lws_name;
use infergate::reconcile::children::Track;
use infergate::reconcile::children::lws::leader_worker_set;

use super::token::{ENGINE, POLICY, apply, assert_denied, create_service, edited, service};
use super::{TURN, Who, apply_yaml, uninstall_admission};
use crate::support::lws::{leaderworkerset_resource, lws_dir};
use crate::support::{self, ControlPlane, Hooks, WAIT, text};

const LEADER: &str = "/spec/leaderWorkerTemplate/leaderTemplate/spec";
const WORKER: &str = "/spec/leaderWorkerTemplate/workerTemplate/spec";

/// LeaderWorkerSet's CRD, from the cache `build-lws.sh` fills.
fn lws_crd() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        lws_dir()
            .join("crd/leaderworkerset.x-k8s.io_leaderworkersets.yaml")
            .display()
            .to_string()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infergates_token_writes_a_leaderworkerset_only_as_it_writes_a_deployment() {
    let _turn = TURN.lock().await;
    let (cp, client, sa_kubeconfig) = support::reconciler_setup(&[lws_crd()]).await;
    let _server = support::start_infergate(cp, support::binary(), &["--no-reconcile"], Hooks::All)
        .await
        .unwrap_or_else(|e| panic!("starting infergate: {e:#}"));
    let sa = support::client_from(&sa_kubeconfig)
        .await
        .expect("SA client");
    let ns = cp.fresh_namespace("confine-lws").await;
    let empty = cp.fresh_namespace("confine-lws-empty").await;
    let ar = leaderworkerset_resource();

    // What infergate builds for a service whose replicas span two nodes.
    let chat = create_service(
        &client,
        &ns,
        service(&ns, "chat", json!({"serviceAccountName": "engine"})),
    )
    .await;
    let deployment =
        infergate::reconcile::children::deployment(&chat, Track::Primary, None).expect("build");
    let group = Group {
        nodes: 2,
        devices_per_pod: 8,
        tensor: 8,
        pipeline: 2,
    };
    let lws = serde_json::to_value(
        leader_worker_set(&deployment, lws_name("chat"), group, None, 0).expect("build"),
    )
    .expect("json");
    for path in [LEADER, WORKER] {
        assert_eq!(
            lws.pointer(path).expect(path)["serviceAccountName"],
            "engine"
        );
    }

    // The policy takes effect a moment after it is applied.
    let privileged = edited(&lws, |l| {
        l.pointer_mut(LEADER).expect("leader")["containers"][0]["securityContext"] =
            json!({"privileged": true});
    });
    let first =
        support::eventually(
            "the policy denies a privileged leader",
            WAIT,
            async || match apply(&sa, &ns, &ar, &privileged).await {
                Err(kube::Error::Api(s)) if s.message.contains(POLICY) => Ok(s.message),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    assert!(first.contains("privileged"), "{first}");

    // Admitted: what infergate builds, created and updated, and (the CRD's
    // leader template being optional) one without a leader template.
    apply(&sa, &ns, &ar, &lws)
        .await
        .expect("the service's LeaderWorkerSet is admitted");
    apply(
        &sa,
        &ns,
        &ar,
        &edited(&lws, |l| l["spec"]["replicas"] = json!(3)),
    )
    .await
    .expect("a change of the LeaderWorkerSet is admitted");
    let workers_only = edited(&lws, |l| {
        l["metadata"]["name"] = json!("chat-workers-lws");
        l["spec"]["leaderWorkerTemplate"]
            .as_object_mut()
            .map(|t| t.remove("leaderTemplate"));
    });
    apply(&sa, &ns, &ar, &workers_only)
        .await
        .expect("a LeaderWorkerSet without a leader template is admitted");

    // Denied: each way out of either template, each a new object.
    let at = |name: &str, path: &str, edit: &dyn Fn(&mut Value)| {
        edited(&lws, |l| {
            l["metadata"]["name"] = json!(name);
            edit(l.pointer_mut(path).expect("path"));
        })
    };
    let host_path = |s: &mut Value| {
        s["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
        s["containers"][0]["volumeMounts"] = json!([{"name": "root", "mountPath": "/host"}]);
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "a privileged worker",
            at("w-privileged", WORKER, &|s| {
                s["containers"][0]["securityContext"] = json!({"privileged": true});
            }),
            "privileged pod template",
        ),
        (
            "a worker's init container is privileged",
            at("w-init", WORKER, &|s| {
                s["initContainers"] = json!([{"name": "init", "image": ENGINE,
                    "securityContext": {"privileged": true}}]);
            }),
            "privileged pod template",
        ),
        (
            "a Windows hostProcess leader",
            at("l-host-process", LEADER, &|s| {
                s["securityContext"] = json!({"windowsOptions": {"hostProcess": true}});
            }),
            "privileged pod template",
        ),
        (
            "a leader that adds a capability",
            at("l-capability", LEADER, &|s| {
                s["containers"][0]["securityContext"] =
                    json!({"capabilities": {"add": ["NET_ADMIN"]}});
            }),
            "adds capabilities",
        ),
        (
            "a worker that adds a capability",
            at("w-capability", WORKER, &|s| {
                s["containers"][0]["securityContext"] =
                    json!({"capabilities": {"add": ["SYS_ADMIN"]}});
            }),
            "adds capabilities",
        ),
        (
            "a leader on the host's network",
            at("l-network", LEADER, &|s| s["hostNetwork"] = json!(true)),
            "host namespaces",
        ),
        (
            "a worker in the host's PID namespace",
            at("w-pid", WORKER, &|s| s["hostPID"] = json!(true)),
            "host namespaces",
        ),
        (
            "a worker in the host's IPC namespace",
            at("w-ipc", WORKER, &|s| s["hostIPC"] = json!(true)),
            "host namespaces",
        ),
        (
            "a leader with a host port",
            at("l-port", LEADER, &|s| {
                s["containers"][0]["ports"][0]["hostPort"] = json!(8000)
            }),
            "host ports",
        ),
        (
            "a worker with a host port",
            at("w-port", WORKER, &|s| {
                s["containers"][0]["ports"] = json!([{"containerPort": 29500, "hostPort": 29500}]);
            }),
            "host ports",
        ),
        (
            "a leader with a hostPath volume",
            at("l-host-path", LEADER, &host_path),
            "hostPath volumes",
        ),
        (
            "a worker with a hostPath volume",
            at("w-host-path", WORKER, &host_path),
            "hostPath volumes",
        ),
        (
            "no leader template and a privileged worker",
            edited(&workers_only, |l| {
                l["metadata"]["name"] = json!("w-only-privileged");
                l.pointer_mut(WORKER).expect("worker")["containers"][0]["securityContext"] =
                    json!({"privileged": true});
            }),
            "privileged pod template",
        ),
        (
            "a worker that runs as another ServiceAccount",
            at("w-account", WORKER, &|s| {
                s["serviceAccountName"] = json!("node-admin");
            }),
            "ServiceAccount node-admin",
        ),
        (
            "volumeClaimTemplates",
            edited(&lws, |l| {
                l["metadata"]["name"] = json!("claims");
                l["spec"]["leaderWorkerTemplate"]["volumeClaimTemplates"] = json!([{
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "1Ti"}}}
                }]);
            }),
            "volumeClaimTemplates",
        ),
        (
            "no owning service",
            edited(&lws, |l| {
                l["metadata"]["name"] = json!("unowned");
                l["metadata"]
                    .as_object_mut()
                    .map(|m| m.remove("ownerReferences"));
            }),
            "only under a controller reference to an InferenceService",
        ),
        (
            "a label naming another service than the owner",
            edited(&lws, |l| {
                l["metadata"]["name"] = json!("relabelled");
                l["metadata"]["labels"]["infergate.dev/service"] = json!("other");
            }),
            "must name the controlling InferenceService",
        ),
        (
            "an owner reference with another uid",
            edited(&lws, |l| {
                l["metadata"]["name"] = json!("forged");
                l["metadata"]["ownerReferences"][0]["uid"] =
                    json!("00000000-0000-0000-0000-000000000000");
            }),
            "that service has uid",
        ),
        (
            "a LeaderWorkerSet owned by a service that does not exist",
            edited(&lws, |l| {
                l["metadata"]["name"] = json!("ghost-lws");
                l["metadata"]["labels"]["infergate.dev/service"] = json!("ghost");
                l["metadata"]["ownerReferences"][0]["name"] = json!("ghost");
            }),
            "InferenceService ghost, which does not exist in namespace",
        ),
    ];
    for (what, obj, says) in &cases {
        assert_denied(what, apply(&sa, &ns, &ar, obj).await, says);
    }
    assert_denied(
        "a LeaderWorkerSet in a namespace without services",
        apply(
            &sa,
            &empty,
            &ar,
            &edited(&lws, |l| l["metadata"]["namespace"] = json!(empty)),
        )
        .await,
        "which does not exist in namespace",
    );
    // An update is held to the same rules as a create.
    assert_denied(
        "the service's LeaderWorkerSet given a privileged worker",
        apply(
            &sa,
            &ns,
            &ar,
            &edited(&lws, |l| {
                l.pointer_mut(WORKER).expect("worker")["containers"][0]["securityContext"] =
                    json!({"privileged": true});
            }),
        )
        .await,
        "privileged pod template",
    );
    let sets = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar);
    for name in cases
        .iter()
        .filter_map(|(_, o, _)| o["metadata"]["name"].as_str())
    {
        assert!(
            sets.get_opt(name).await.expect("get").is_none(),
            "{name} was stored"
        );
    }

    // What it holds on LeaderWorkerSets is the reconciler's: no scale, no
    // status, nothing of the StatefulSets LeaderWorkerSet makes.
    let as_sa = Api::<DynamicObject>::namespaced_with(sa.clone(), &ns, &ar);
    let scale = json!({"spec": {"replicas": 5}});
    let forbidden = |what: &str, result: Result<(), kube::Error>| match result {
        Err(kube::Error::Api(s)) if s.code == 403 => eprintln!("forbidden, {what}: {}", s.message),
        other => panic!("{what} with infergate's token: {other:?}"),
    };
    forbidden(
        "patching a LeaderWorkerSet's scale",
        as_sa
            .patch_scale("chat-lws", &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .map(|_| ()),
    );
    forbidden(
        "patching a LeaderWorkerSet's status",
        as_sa
            .patch_status(
                "chat-lws",
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"readyReplicas": 3}})),
            )
            .await
            .map(|_| ()),
    );
    forbidden(
        "listing StatefulSets",
        Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(sa.clone(), &ns)
            .list(&ListParams::default())
            .await
            .map(|_| ()),
    );
    as_sa
        .delete("chat-workers-lws", &Default::default())
        .await
        .expect("infergate deletes a LeaderWorkerSet it no longer wants");
}

/// A LeaderWorkerSet that infergate's token may not write: a privileged
/// leader and a worker with the node's root mounted; `engine` is its
/// image's tag. With `owner` (the uid of the InferenceService `chat`), it
/// also carries infergate's label and a controller reference to `chat`.
fn lws_yaml(ns: &str, name: &str, engine: u32, owner: Option<&str>) -> String {
    let (labels, refs) = match owner {
        Some(uid) => (
            ", infergate.dev/service: chat",
            format!(
                "  ownerReferences: [{{apiVersion: infergate.dev/v1beta1, kind: InferenceService, name: chat, uid: {uid}, controller: true}}]\n"
            ),
        ),
        None => ("", String::new()),
    };
    format!(
        "apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: {name}
  namespace: {ns}
  labels: {{app: {name}{labels}}}
{refs}spec:
  replicas: 1
  leaderWorkerTemplate:
    size: 2
    leaderTemplate:
      spec:
        containers: [{{name: leader, image: registry.example.com/engine:{engine}, securityContext: {{privileged: true}}}}]
    workerTemplate:
      spec:
        containers: [{{name: worker, image: registry.example.com/engine:{engine}, volumeMounts: [{{name: host, mountPath: /host}}]}}]
        volumes: [{{name: host, hostPath: {{path: /}}}}]
"
    )
}

/// `who` creates, updates and scales such LeaderWorkerSets in `plain` (no
/// InferenceServices) and `served` (with `chat`, whose uid is `uid`), one
/// of them looking like infergate's, and dry-runs them in `kube-system`:
/// each write succeeds, as it does without infergate.
fn writes_as_without_infergate(
    cp: &ControlPlane,
    who: &Who,
    (plain, served): (&str, &str),
    uid: &str,
    tag: &str,
) {
    let apply = ["apply", "-f", "-"];
    for ns in [plain, served] {
        let name = format!("lws-{tag}");
        for engine in [1, 2] {
            who.must(
                cp,
                &format!("apply LeaderWorkerSet {ns}/{name} with engine {engine}"),
                &apply,
                Some(&lws_yaml(ns, &name, engine, None)),
            );
        }
        who.must(
            cp,
            &format!("scale LeaderWorkerSet {ns}/{name}"),
            &[
                "scale",
                &format!("leaderworkersets.leaderworkerset.x-k8s.io/{name}"),
                "--replicas=2",
                "-n",
                ns,
            ],
            None,
        );
    }
    who.must(
        cp,
        "create a LeaderWorkerSet that looks like infergate's",
        &apply,
        Some(&lws_yaml(served, &format!("lookalike-{tag}"), 1, Some(uid))),
    );
    who.must(
        cp,
        "dry-run a LeaderWorkerSet in kube-system",
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&lws_yaml("kube-system", &format!("lws-{tag}"), 1, None)),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn others_write_leaderworkersets_as_without_infergate() {
    let _turn = TURN.lock().await;
    support::init_tracing();
    let cp = support::control_plane().await;
    cp.install_crds().await;
    cp.install_crd_file(lws_crd()).await;
    let plain = cp.fresh_namespace("citizen-lws-plain").await;
    let served = cp.fresh_namespace("citizen-lws-served").await;

    // An `edit` ServiceAccount; the cluster lets `edit` write
    // LeaderWorkerSets and their scale (an aggregated role, as a platform
    // that runs LeaderWorkerSet would add).
    apply_yaml(
        cp,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: citizen-lws-edit\n  labels: {rbac.authorization.k8s.io/aggregate-to-edit: \"true\"}\nrules:\n  - apiGroups: [leaderworkerset.x-k8s.io]\n    resources: [leaderworkersets, leaderworkersets/scale]\n    verbs: [get, list, watch, create, update, patch, delete]\n",
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
    support::eventually("edit covers LeaderWorkerSets", WAIT, async || {
        let out = users[1].kubectl(
            cp,
            &[
                "auth",
                "can-i",
                "create",
                "leaderworkersets.leaderworkerset.x-k8s.io",
                "-n",
                &served,
            ],
            None,
        );
        (text(&out).trim() == "yes").then_some(())
    })
    .await;

    // infergate installed and serving (`deploy/`'s RBAC and policy, its
    // webhooks), and a namespace that holds a service.
    let infergate = Who::User(
        "infergate's ServiceAccount",
        cp.deployed_service_account().await,
    );
    let mut server =
        support::start_infergate(cp, support::binary(), &["--no-reconcile"], Hooks::All)
            .await
            .unwrap_or_else(|e| panic!("starting infergate: {e:#}"));
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
    let out = cp.kubectl(&[
        "get",
        "inferenceservice",
        "chat",
        "-n",
        &served,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let uid = String::from_utf8(out.stdout).expect("UTF-8");

    // The object the others write below, written with infergate's token
    // under its existing service: denied.
    let denied = support::eventually(
        "the policy denies infergate's token the LeaderWorkerSet",
        WAIT,
        async || {
            let yaml = lws_yaml(&served, "chat-lws", 1, Some(&uid));
            let out = infergate.kubectl(cp, &["apply", "-f", "-"], Some(&yaml));
            let said = text(&out);
            (!out.status.success() && said.contains(POLICY))
                .then_some(said.clone())
                .ok_or(said)
        },
    )
    .await;
    assert!(denied.contains("privileged"), "{denied}");

    let namespaces = (plain.as_str(), served.as_str());
    for (i, who) in users.iter().enumerate() {
        writes_as_without_infergate(cp, who, namespaces, &uid, &format!("serving-{i}"));
    }
    // infergate down: its registrations call nobody for these writes.
    server.child.kill().expect("stopping infergate");
    let _ = server.child.wait();
    for (i, who) in users.iter().enumerate() {
        writes_as_without_infergate(cp, who, namespaces, &uid, &format!("down-{i}"));
    }
    // And without infergate's admission objects at all: the same.
    uninstall_admission(cp);
    for (i, who) in users.iter().enumerate() {
        writes_as_without_infergate(cp, who, namespaces, &uid, &format!("without-{i}"));
    }
}
