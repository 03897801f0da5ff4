//! Somebody holding infergate's own ServiceAccount token (TokenRequest of
//! `deploy/`'s ServiceAccount, with `deploy/`'s RBAC, admission policy and
//! webhook registrations): what it may still write, and every way out that
//! is closed.
//!
//! What infergate builds for a service (its Deployment, its endpoint
//! picker's Deployment, Role and RoleBinding, a RayService with the same pod
//! template) is admitted; the same objects made privileged, given
//! capabilities, host namespaces, host ports, hostPath volumes or another
//! ServiceAccount, without an owning service, under a forged owner or an
//! owner that does not exist, are each denied by the admission policy
//! `infergate-confine` or by infergate's webhook
//! `confine.children.infergate.dev`; a RayCluster's replica counts may
//! change, its pod templates may not; a Role or RoleBinding other than a
//! picker's, a ClusterRole and a ClusterRoleBinding are denied. Last, the
//! reconciler running as that ServiceAccount reconciles services under all
//! of it.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::children::Track;
use infergate::reconcile::children::endpoint_picker::endpoint_picker;

use super::TURN;
use crate::support::{self, Hooks, Reconciler, WAIT, condition, wait_for};

pub(super) const ENGINE: &str = "registry.example.com/vllm:0.9";
/// The admission policy (what an object says on its own).
pub(super) const POLICY: &str = "infergate-confine";
/// infergate's webhook (what the controlling service allows).
const WEBHOOK: &str = "confine.children.infergate.dev";

pub(super) fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn deployments() -> ApiResource {
    resource("apps", "v1", "Deployment", "deployments")
}

fn rayservices() -> ApiResource {
    resource("ray.io", "v1", "RayService", "rayservices")
}

fn rayclusters() -> ApiResource {
    resource("ray.io", "v1", "RayCluster", "rayclusters")
}

fn roles() -> ApiResource {
    resource("rbac.authorization.k8s.io", "v1", "Role", "roles")
}

fn rolebindings() -> ApiResource {
    resource(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    )
}

/// Server-side apply of `obj` into `ns` with `client`, as the reconciler
/// applies its children (field manager `infergate`, forced).
pub(super) async fn apply(
    client: &kube::Client,
    ns: &str,
    ar: &ApiResource,
    obj: &Value,
) -> Result<(), kube::Error> {
    let name = obj["metadata"]["name"].as_str().expect("name");
    let obj: DynamicObject = serde_json::from_value(obj.clone()).expect("object");
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar)
        .patch(
            name,
            &PatchParams::apply("infergate").force(),
            &Patch::Apply(&obj),
        )
        .await
        .map(|_| ())
}

/// The policy or the webhook denied `what` with the HTTP status `code`
/// (403, reason Forbidden) and a message that `says` so.
fn assert_denied_with(what: &str, result: Result<(), kube::Error>, code: u16, says: &str) {
    match result {
        Err(kube::Error::Api(status))
            if status.message.contains(POLICY) || status.message.contains(WEBHOOK) =>
        {
            assert_eq!(status.code, code, "{what}: {status:?}");
            assert!(status.message.contains(says), "{what}: {}", status.message);
            eprintln!("denied, {what}: {}", status.message);
        }
        other => panic!("{what}: not denied by the policy or the webhook: {other:?}"),
    }
}

pub(super) fn assert_denied(what: &str, result: Result<(), kube::Error>, says: &str) {
    assert_denied_with(what, result, 403, says);
}

/// `base` changed by `edit`.
pub(super) fn edited(base: &Value, edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = base.clone();
    edit(&mut v);
    v
}

pub(super) async fn create_service(
    client: &kube::Client,
    ns: &str,
    svc: Value,
) -> InferenceService {
    let svc: InferenceService = serde_json::from_value(svc).expect("service");
    Api::<InferenceService>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service")
}

pub(super) fn service(ns: &str, name: &str, extra: Value) -> Value {
    let mut spec = json!({
        "model": {"ref": "llama3-8b"},
        "engine": {"image": ENGINE},
        "replicas": 1,
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// A RayService as infergate writes one for `svc` (its head and worker pod
/// templates are the engine's).
fn rayservice(svc: &InferenceService, template: &Value) -> Value {
    let owner = infergate::reconcile::children::owner_reference(svc).expect("owner");
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {
            "name": svc.metadata.name,
            "labels": infergate::reconcile::children::labels(svc, Track::Primary),
            "ownerReferences": [owner],
        },
        "spec": {
            "serveConfigV2": "applications: []\n",
            "rayClusterConfig": {
                "headGroupSpec": {"rayStartParams": {"num-cpus": "0"}, "template": template},
                "workerGroupSpecs": [{
                    "groupName": "workers", "replicas": 1, "minReplicas": 1, "maxReplicas": 1,
                    "rayStartParams": {}, "template": template,
                }],
            },
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infergates_token_writes_only_what_its_services_allow() {
    let _turn = TURN.lock().await;
    let (cp, client, sa_kubeconfig) =
        support::reconciler_setup(&[support::rayservice_crd(), support::raycluster_crd()]).await;
    // infergate's webhooks, its confinement of its own writes among them,
    // served by a process that only answers (the reconciler below is the
    // ServiceAccount's).
    let _server = support::start_infergate(cp, support::binary(), &["--no-reconcile"], Hooks::All)
        .await
        .unwrap_or_else(|e| panic!("starting infergate: {e:#}"));
    let sa = support::client_from(&sa_kubeconfig)
        .await
        .expect("SA client");
    let ns = cp.fresh_namespace("confine").await;
    let empty = cp.fresh_namespace("confine-empty").await;

    // `chat` runs its engine as the ServiceAccount `engine`; `pools` routes
    // through InferencePools with the endpoint pickers infergate runs.
    let chat = create_service(
        &client,
        &ns,
        service(&ns, "chat", json!({"serviceAccountName": "engine"})),
    )
    .await;
    let pools = create_service(
        &client,
        &ns,
        service(
            &ns,
            "pools",
            json!({"routing": {"backendKind": "InferencePool",
                "endpointPicker": {"mode": "Owned", "image": "registry.example.com/epp:v1"}}}),
        ),
    )
    .await;

    // What infergate builds for them.
    let deployment = serde_json::to_value(
        infergate::reconcile::children::deployment(&chat, Track::Primary, None).expect("build"),
    )
    .expect("json");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "engine"
    );
    let picker = serde_json::to_value(
        endpoint_picker(&pools, Track::Primary)
            .expect("build")
            .deployment,
    )
    .expect("json");
    assert_eq!(
        picker["spec"]["template"]["spec"]["serviceAccountName"],
        "pools-epp"
    );

    // The policy takes effect a moment after it is applied.
    let privileged = edited(&deployment, |d| {
        d["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
            json!({"privileged": true});
    });
    let first = support::eventually(
        "the policy denies a privileged template",
        WAIT,
        async || match apply(&sa, &ns, &deployments(), &privileged).await {
            Err(kube::Error::Api(s)) if s.message.contains(POLICY) => Ok(s.message),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    assert!(first.contains("privileged"), "{first}");

    // Admitted: what infergate builds.
    apply(&sa, &ns, &deployments(), &deployment)
        .await
        .expect("the service's Deployment is admitted");
    apply(&sa, &ns, &deployments(), &picker)
        .await
        .expect("the endpoint picker's Deployment is admitted");

    // Denied: each way out of the pod template.
    let template = |edit: &dyn Fn(&mut Value)| {
        edited(&deployment, |d| edit(&mut d["spec"]["template"]["spec"]))
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "an init container is privileged",
            template(&|s| {
                s["initContainers"] = json!([{"name": "init", "image": ENGINE,
                    "securityContext": {"privileged": true}}]);
            }),
            "privileged pod template",
        ),
        (
            "a container adds a capability",
            template(&|s| {
                s["containers"][0]["securityContext"] =
                    json!({"capabilities": {"add": ["NET_ADMIN"]}});
            }),
            "adds capabilities",
        ),
        (
            "hostNetwork",
            template(&|s| s["hostNetwork"] = json!(true)),
            "host namespaces",
        ),
        (
            "hostPID",
            template(&|s| s["hostPID"] = json!(true)),
            "host namespaces",
        ),
        (
            "hostIPC",
            template(&|s| s["hostIPC"] = json!(true)),
            "host namespaces",
        ),
        (
            "a host port",
            template(&|s| s["containers"][0]["ports"][0]["hostPort"] = json!(8000)),
            "host ports",
        ),
        (
            "a hostPath volume",
            template(&|s| {
                s["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
                s["containers"][0]["volumeMounts"] =
                    json!([{"name": "root", "mountPath": "/host"}]);
            }),
            "hostPath volumes",
        ),
        (
            "another ServiceAccount",
            template(&|s| s["serviceAccountName"] = json!("deployer")),
            "not one InferenceService",
        ),
        (
            "another ServiceAccount in the deprecated field",
            template(&|s| {
                s.as_object_mut().map(|s| s.remove("serviceAccountName"));
                s["serviceAccount"] = json!("deployer");
            }),
            "not one InferenceService",
        ),
        (
            // A new object: on the stored one, the API server keeps the
            // deprecated field it mirrored from serviceAccountName.
            "the namespace's default ServiceAccount instead of the service's",
            edited(&deployment, |d| {
                d["metadata"]["name"] = json!("chat-default");
                let spec = &mut d["spec"]["template"]["spec"];
                spec.as_object_mut().map(|s| s.remove("serviceAccountName"));
            }),
            "not one InferenceService",
        ),
        (
            "an endpoint picker's ServiceAccount for a service without pickers",
            edited(&deployment, |d| {
                d["spec"]["template"]["metadata"]["labels"]["infergate.dev/component"] =
                    json!("endpoint-picker");
                d["spec"]["template"]["spec"]["serviceAccountName"] = json!("chat-epp");
            }),
            "not one InferenceService",
        ),
        (
            "another endpoint picker's ServiceAccount",
            edited(&picker, |d| {
                d["spec"]["template"]["spec"]["serviceAccountName"] = json!("deployer");
            }),
            "not one InferenceService",
        ),
        (
            "no owning service",
            edited(&deployment, |d| {
                d["metadata"]["name"] = json!("unowned");
                d["metadata"]
                    .as_object_mut()
                    .map(|m| m.remove("ownerReferences"));
            }),
            "only under a controller reference to an InferenceService",
        ),
        (
            "an owner reference with another uid",
            edited(&deployment, |d| {
                d["metadata"]["name"] = json!("forged");
                d["metadata"]["ownerReferences"][0]["uid"] =
                    json!("00000000-0000-0000-0000-000000000000");
                d["spec"]["template"]["spec"]["serviceAccountName"] = json!("deployer");
            }),
            "that service has uid",
        ),
        (
            "a label naming another service than the owner",
            edited(&deployment, |d| {
                d["metadata"]["labels"]["infergate.dev/service"] = json!("pools");
            }),
            "must name the controlling InferenceService",
        ),
    ];
    for (what, obj, says) in &cases {
        assert_denied(what, apply(&sa, &ns, &deployments(), obj).await, says);
    }

    // An owner that does not exist skips nothing: in a namespace with
    // services and in one without any.
    let ghost = edited(&deployment, |d| {
        d["metadata"]["name"] = json!("ghost");
        d["metadata"]["labels"]["infergate.dev/service"] = json!("ghost");
        d["metadata"]["ownerReferences"][0]["name"] = json!("ghost");
        d["spec"]["template"]["spec"]["serviceAccountName"] = json!("deployer");
    });
    assert_denied(
        "a Deployment owned by a service that does not exist",
        apply(&sa, &ns, &deployments(), &ghost).await,
        "InferenceService ghost, which does not exist in namespace",
    );
    assert_denied(
        "a Deployment in a namespace without services",
        apply(
            &sa,
            &empty,
            &deployments(),
            &edited(&deployment, |d| d["metadata"]["namespace"] = json!(empty)),
        )
        .await,
        "which does not exist in namespace",
    );

    // Roles and RoleBindings: an endpoint picker's, exactly, and nothing else.
    let picker_rbac = endpoint_picker(&pools, Track::Primary).expect("build");
    let role = serde_json::to_value(&picker_rbac.role).expect("json");
    let binding = serde_json::to_value(&picker_rbac.role_binding).expect("json");
    apply(&sa, &ns, &roles(), &role)
        .await
        .expect("the endpoint picker's Role is admitted");
    apply(&sa, &ns, &rolebindings(), &binding)
        .await
        .expect("the endpoint picker's RoleBinding is admitted");
    let grant_deployments = json!({"apiGroups": ["apps"], "resources": ["deployments"],
        "verbs": ["create"]});
    let rbac_cases: Vec<(&str, ApiResource, &str, Value, &str)> = vec![
        (
            "a picker's Role with one more rule",
            roles(),
            ns.as_str(),
            edited(&role, |r| {
                r["rules"]
                    .as_array_mut()
                    .expect("rules")
                    .push(grant_deployments.clone())
            }),
            "only with an endpoint picker's rules",
        ),
        (
            "a Role named for no picker",
            roles(),
            ns.as_str(),
            edited(&role, |r| r["metadata"]["name"] = json!("grant")),
            "named after its owning InferenceService",
        ),
        (
            "a Role in kube-system without an owner",
            roles(),
            "kube-system",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "grant", "namespace": "kube-system"},
                "rules": [grant_deployments.clone()]}),
            "only under a controller reference to an InferenceService",
        ),
        (
            "a picker's Role for a service that runs no pickers",
            roles(),
            ns.as_str(),
            {
                let chat_role = endpoint_picker(
                    &serde_json::from_value::<InferenceService>(edited(
                        &serde_json::to_value(&chat).expect("json"),
                        |c| {
                            c["spec"]["routing"] = json!({"backendKind": "InferencePool",
                                "endpointPicker": {"mode": "Owned", "image": "registry.example.com/epp:v1"}});
                        },
                    ))
                    .expect("service"),
                    Track::Primary,
                )
                .expect("build")
                .role;
                serde_json::to_value(chat_role).expect("json")
            },
            "runs no endpoint pickers",
        ),
        (
            // (A ClusterRole whose rights infergate holds, so that RBAC's
            // own escalation check lets the request reach admission.)
            "a picker's RoleBinding to a ClusterRole",
            rolebindings(),
            ns.as_str(),
            // (A new binding: a stored one's roleRef cannot change.)
            edited(&binding, |b| {
                b["metadata"]["name"] = json!("pools-canary-epp");
                b["subjects"][0]["name"] = json!("pools-canary-epp");
                b["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole", "name": "system:basic-user"});
            }),
            "bind only an endpoint picker's Role",
        ),
        (
            "a picker's RoleBinding to a tenant's ServiceAccount",
            rolebindings(),
            ns.as_str(),
            edited(&binding, |b| b["subjects"][0]["name"] = json!("deployer")),
            "bind only an endpoint picker's Role",
        ),
        (
            "a RoleBinding in kube-system without an owner",
            rolebindings(),
            "kube-system",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "grant", "namespace": "kube-system"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:basic-user"},
                "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]}),
            "only under a controller reference to an InferenceService",
        ),
    ];
    for (what, ar, in_ns, obj, says) in &rbac_cases {
        let obj = edited(obj, |o| o["metadata"]["namespace"] = json!(in_ns));
        assert_denied(what, apply(&sa, in_ns, ar, &obj).await, says);
    }
    // Cluster-wide RBAC: not even asked (infergate holds no right to it).
    for (kind, plural, obj) in [
        (
            "ClusterRole",
            "clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "infergate-grant"}, "rules": [grant_deployments.clone()]}),
        ),
        (
            "ClusterRoleBinding",
            "clusterrolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "infergate-grant"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]}),
        ),
    ] {
        let ar = resource("rbac.authorization.k8s.io", "v1", kind, plural);
        let obj: DynamicObject = serde_json::from_value(obj).expect("object");
        let result = Api::<DynamicObject>::all_with(sa.clone(), &ar)
            .patch(
                "infergate-grant",
                &PatchParams::apply("infergate").force(),
                &Patch::Apply(&obj),
            )
            .await;
        match result {
            Err(kube::Error::Api(s))
                if s.code == 403 && s.message.contains("cannot patch resource") =>
            {
                eprintln!("denied, a {kind}: {}", s.message);
            }
            other => panic!("a {kind} written with infergate's token: {other:?}"),
        }
    }

    // RayServices: the head's and the workers' templates.
    let pod_template = &deployment["spec"]["template"];
    let ray = rayservice(&chat, pod_template);
    apply(&sa, &ns, &rayservices(), &ray)
        .await
        .expect("the RayService is admitted");
    let head = "/spec/rayClusterConfig/headGroupSpec/template/spec";
    let worker = "/spec/rayClusterConfig/workerGroupSpecs/0/template/spec";
    let at = |path: &str, edit: &dyn Fn(&mut Value)| {
        edited(&ray, |r| edit(r.pointer_mut(path).expect("path")))
    };
    let ray_cases: Vec<(&str, Value, &str)> = vec![
        (
            "a privileged Ray worker",
            at(worker, &|s| {
                s["containers"][0]["securityContext"] = json!({"privileged": true});
            }),
            "privileged pod template",
        ),
        (
            "a Ray head on the host's network",
            at(head, &|s| s["hostNetwork"] = json!(true)),
            "host namespaces",
        ),
        (
            "a Ray head with a capability",
            at(head, &|s| {
                s["containers"][0]["securityContext"] =
                    json!({"capabilities": {"add": ["SYS_ADMIN"]}});
            }),
            "adds capabilities",
        ),
        (
            "a Ray worker with a hostPath volume",
            at(worker, &|s| {
                s["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
            }),
            "hostPath volumes",
        ),
        (
            "a Ray worker with a host port",
            at(worker, &|s| {
                s["containers"][0]["ports"][0]["hostPort"] = json!(8000)
            }),
            "host ports",
        ),
        (
            "a Ray worker as another ServiceAccount",
            at(worker, &|s| s["serviceAccountName"] = json!("deployer")),
            "not one InferenceService",
        ),
        (
            "a Ray head as another ServiceAccount",
            at(head, &|s| s["serviceAccountName"] = json!("deployer")),
            "not one InferenceService",
        ),
        (
            "autoscaler options (a container of the head infergate does not build)",
            edited(&ray, |r| {
                r["spec"]["rayClusterConfig"]["autoscalerOptions"] =
                    json!({"securityContext": {"privileged": true}});
            }),
            "autoscalerOptions",
        ),
    ];
    for (what, obj, says) in &ray_cases {
        assert_denied(what, apply(&sa, &ns, &rayservices(), obj).await, says);
    }

    // A RayCluster of that RayService, as KubeRay creates it (as admin):
    // infergate may scale its workers, never change its templates.
    let rs = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &rayservices())
        .get("chat")
        .await
        .expect("RayService");
    let cluster = json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "chat-raycluster", "namespace": ns, "ownerReferences": [{
            "apiVersion": "ray.io/v1", "kind": "RayService", "name": "chat",
            "uid": rs.metadata.uid, "controller": true}]},
        "spec": ray["spec"]["rayClusterConfig"].clone(),
    });
    let clusters = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &rayclusters());
    clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(cluster.clone()).expect("cluster"),
        )
        .await
        .expect("create RayCluster");
    let as_sa = Api::<DynamicObject>::namespaced_with(sa.clone(), &ns, &rayclusters());
    let groups = |edit: &dyn Fn(&mut Value)| {
        let mut g = cluster["spec"]["workerGroupSpecs"].clone();
        edit(&mut g[0]);
        json!({"spec": {"workerGroupSpecs": g}})
    };
    let patch = |p: Value| {
        let as_sa = as_sa.clone();
        async move {
            as_sa
                .patch(
                    "chat-raycluster",
                    &PatchParams::default(),
                    &Patch::Merge(&p),
                )
                .await
                .map(|_| ())
        }
    };
    patch(groups(&|g| {
        g["replicas"] = json!(2);
        g["maxReplicas"] = json!(2);
    }))
    .await
    .expect("scaling the RayCluster's workers is admitted");
    assert_denied(
        "a RayCluster's worker template changed",
        patch(groups(&|g| {
            g["template"]["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        }))
        .await,
        "never its pod templates",
    );
    assert_denied(
        "a RayCluster's head template changed",
        patch(json!({"spec": {"headGroupSpec": {"template": {"spec": {
            "serviceAccountName": "deployer"}}}}}))
        .await,
        "never its pod templates",
    );

    // Under the policy, the reconciler running as the ServiceAccount
    // reconciles a service: its Deployment is written, with the service's
    // ServiceAccount, and the service is Reconciled.
    let web_ns = cp.fresh_namespace("confine-web").await;
    let _reconciler = Reconciler::start(sa_kubeconfig, support::reconcile_config("confine-e2e"));
    create_service(
        &client,
        &web_ns,
        service(&web_ns, "web", json!({"serviceAccountName": "engine"})),
    )
    .await;
    let web =
        wait_for::<Deployment>(&client, &web_ns, "web", "the Deployment", WAIT, |_| true).await;
    assert_eq!(
        web.spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.service_account_name)
            .as_deref(),
        Some("engine")
    );
    wait_for::<InferenceService>(&client, &web_ns, "web", "Reconciled", WAIT, |s| {
        condition(s, "Reconciled").is_some_and(|c| c.status == "True")
    })
    .await;
    // And the service of the first namespace, whose Deployment the cases
    // above left as infergate builds it.
    wait_for::<InferenceService>(&client, &ns, "chat", "Reconciled", WAIT, |s| {
        condition(s, "Reconciled").is_some_and(|c| c.status == "True")
    })
    .await;
}
