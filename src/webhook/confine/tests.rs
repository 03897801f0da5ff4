use serde_json::{Value, json};

use super::*;
use crate::api::v1beta1::InferenceService;

const UID: &str = "3f1c0000-0000-4000-8000-000000000001";

fn service(spec: Value) -> InferenceService {
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": UID},
        "spec": spec
    }))
    .expect("service")
}

fn plain() -> InferenceService {
    service(json!({"model": {"ref": "llama3-8b"}}))
}

fn with_pickers() -> InferenceService {
    service(json!({
        "model": {"ref": "llama3-8b"},
        "serviceAccountName": "runner",
        "routing": {"backendKind": "InferencePool", "endpointPicker": {"mode": "Owned"}}
    }))
}

fn owner(name: &str, uid: &str) -> Value {
    json!([{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "name": name, "uid": uid, "controller": true}])
}

fn deployment(owners: Value, account: Option<&str>, picker: bool) -> Child {
    let labels = if picker {
        json!({"infergate.dev/component": "endpoint-picker"})
    } else {
        json!({})
    };
    let mut spec = json!({"containers": [{"name": "engine", "image": "vllm"}]});
    if let Some(a) = account {
        spec["serviceAccountName"] = json!(a);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "chat", "namespace": "team-a", "ownerReferences": owners},
        "spec": {"template": {"metadata": {"labels": labels}, "spec": spec}}
    }))
    .expect("child")
}

fn needs(child: &Child, kind: &str) -> Needs {
    Needs::of(child, kind, "chat", "team-a").expect("controlled by a service")
}

#[test]
fn a_child_of_a_service_that_does_not_exist_is_denied() {
    let child = deployment(owner("ghost", UID), Some("kube-system-admin"), false);
    let err = needs(&child, "Deployment").check(None).unwrap_err();
    assert!(err.contains("InferenceService ghost"), "{err}");
    assert!(err.contains("does not exist in namespace team-a"), "{err}");
}

#[test]
fn the_reference_must_carry_the_services_uid() {
    let child = deployment(owner("chat", "another-uid"), None, false);
    let err = needs(&child, "Deployment")
        .check(Some(&plain()))
        .unwrap_err();
    assert!(err.contains("another-uid") && err.contains(UID), "{err}");
}

#[test]
fn engine_pods_run_only_as_the_services_account() {
    let svc = plain();
    let ok = deployment(owner("chat", UID), None, false);
    assert_eq!(needs(&ok, "Deployment").check(Some(&svc)), Ok(()));
    let named_default = deployment(owner("chat", UID), Some("default"), false);
    assert_eq!(
        needs(&named_default, "Deployment").check(Some(&svc)),
        Ok(())
    );
    let other = deployment(owner("chat", UID), Some("deployer"), false);
    let err = needs(&other, "Deployment").check(Some(&svc)).unwrap_err();
    assert!(err.contains("ServiceAccount deployer"), "{err}");

    let svc = with_pickers();
    let ok = deployment(owner("chat", UID), Some("runner"), false);
    assert_eq!(needs(&ok, "Deployment").check(Some(&svc)), Ok(()));
    let default = deployment(owner("chat", UID), None, false);
    let err = needs(&default, "Deployment").check(Some(&svc)).unwrap_err();
    assert!(
        err.contains("ServiceAccount default")
            && err.contains("(runner, or chat-epp or chat-canary-epp"),
        "{err}"
    );
}

#[test]
fn the_deprecated_service_account_field_is_checked_too() {
    let mut child = deployment(owner("chat", UID), None, false);
    let template = child.spec.as_mut().unwrap().template.as_mut().unwrap();
    template.spec.as_mut().unwrap().service_account = Some("deployer".to_owned());
    let err = needs(&child, "Deployment")
        .check(Some(&plain()))
        .unwrap_err();
    assert!(err.contains("ServiceAccount deployer"), "{err}");
}

#[test]
fn a_pickers_account_only_for_a_service_that_runs_pickers() {
    let picker = deployment(owner("chat", UID), Some("chat-epp"), true);
    assert_eq!(
        needs(&picker, "Deployment").check(Some(&with_pickers())),
        Ok(())
    );
    let err = needs(&picker, "Deployment")
        .check(Some(&plain()))
        .unwrap_err();
    assert!(err.contains("ServiceAccount chat-epp"), "{err}");
    // An engine Deployment may not take a picker's account.
    let engine = deployment(owner("chat", UID), Some("chat-epp"), false);
    assert!(
        needs(&engine, "Deployment")
            .check(Some(&with_pickers()))
            .is_err()
    );
}

#[test]
fn a_ray_services_head_and_workers_are_checked() {
    let child: Child = serde_json::from_value(json!({
        "metadata": {"name": "chat", "ownerReferences": owner("chat", UID)},
        "spec": {"rayClusterConfig": {
            "headGroupSpec": {"template": {"spec": {"containers": []}}},
            "workerGroupSpecs": [
                {"template": {"spec": {"containers": []}}},
                {"template": {"spec": {"serviceAccountName": "node-admin", "containers": []}}}
            ]
        }}
    }))
    .expect("child");
    let err = needs(&child, "RayService")
        .check(Some(&plain()))
        .unwrap_err();
    assert!(err.contains("ServiceAccount node-admin"), "{err}");
}

#[test]
fn a_leaderworkersets_leader_and_workers_are_checked() {
    let group = |leader: Option<&str>, worker: Option<&str>| -> Child {
        let pod = |account: Option<&str>| match account {
            Some(a) => json!({"spec": {"serviceAccountName": a, "containers": []}}),
            None => json!({"spec": {"containers": []}}),
        };
        serde_json::from_value(json!({
            "metadata": {"name": "chat-lws", "ownerReferences": owner("chat", UID)},
            "spec": {"leaderWorkerTemplate": {
                "size": 2, "leaderTemplate": pod(leader), "workerTemplate": pod(worker)
            }}
        }))
        .expect("child")
    };
    let svc = plain();
    assert_eq!(
        needs(&group(None, None), "LeaderWorkerSet").check(Some(&svc)),
        Ok(())
    );
    for (leader, worker) in [(Some("node-admin"), None), (None, Some("node-admin"))] {
        let err = needs(&group(leader, worker), "LeaderWorkerSet")
            .check(Some(&svc))
            .unwrap_err();
        assert!(err.contains("ServiceAccount node-admin"), "{err}");
    }
}

#[test]
fn roles_and_bindings_only_for_a_service_that_runs_pickers() {
    let role: Child = serde_json::from_value(json!({
        "metadata": {"name": "chat-epp", "ownerReferences": owner("chat", UID)},
        "rules": []
    }))
    .expect("role");
    for kind in ["Role", "RoleBinding"] {
        let needs = Needs::of(&role, kind, "chat-epp", "team-a").expect("needs");
        assert_eq!(needs.check(Some(&with_pickers())), Ok(()), "{kind}");
        let err = needs.check(Some(&plain())).unwrap_err();
        assert!(err.contains("runs no endpoint pickers"), "{kind}: {err}");
    }
}

#[test]
fn objects_not_controlled_by_a_service_are_left_to_the_policy() {
    let by_ray: Child = serde_json::from_value(json!({
        "metadata": {"ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService",
            "name": "chat", "uid": UID, "controller": true}]}
    }))
    .expect("child");
    assert_eq!(Needs::of(&by_ray, "RayCluster", "chat-x", "team-a"), None);
    // Not the controller: an owner reference alone does not count.
    let mut not_controller = deployment(owner("chat", UID), None, false);
    not_controller.metadata.owner_references[0].controller = None;
    assert_eq!(
        Needs::of(&not_controller, "Deployment", "chat", "team-a"),
        None
    );
    // Another group's kind of the same name.
    let forged: Child = serde_json::from_value(json!({
        "metadata": {"ownerReferences": [{"apiVersion": "example.com/v1",
            "kind": "InferenceService", "name": "chat", "uid": UID, "controller": true}]}
    }))
    .expect("child");
    assert_eq!(Needs::of(&forged, "Deployment", "chat", "team-a"), None);
}

#[test]
fn a_denial_names_the_object() {
    let child = deployment(owner("ghost", UID), None, false);
    let needs = needs(&child, "Deployment");
    let message = needs.denial(&needs.check(None).unwrap_err());
    assert!(
        message.starts_with("infergate may not write Deployment team-a/chat: "),
        "{message}"
    );
}

#[tokio::test]
async fn without_an_api_server_an_unconfirmed_write_is_denied() {
    let child = deployment(owner("chat", UID), None, false);
    let needs = needs(&child, "Deployment");
    let err = Owners::default().settle(&needs).await.unwrap_err();
    assert!(err.contains("could not be confirmed"), "{err}");
}
