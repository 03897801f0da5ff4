use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde_json::{Value, json};

use super::owned::*;

/// A Deployment as infergate applies it.
fn desired() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "chat", "namespace": "team",
            "labels": {"app.kubernetes.io/managed-by": "infergate"},
            "annotations": {"infergate.dev/applied": "d1"},
            "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                 "name": "chat", "uid": "svc-uid", "controller": true}]
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "chat"}},
            "template": {
                "metadata": {"labels": {"app": "chat"}},
                "spec": {
                    "containers": [{
                        "name": "engine", "image": "vllm:0.9", "args": ["--port", "8000"],
                        "env": [{"name": "HF_HOME", "value": "/cache"}],
                        "ports": [{"name": "http", "containerPort": 8000}],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}
                    }],
                    "tolerations": [{"key": "gpu", "operator": "Exists"}],
                    "volumes": []
                }
            }
        }
    })
}

/// The field set the API server records for infergate's apply of
/// [`desired`].
fn recorded() -> Value {
    json!({
        "f:metadata": {
            "f:annotations": {"f:infergate.dev/applied": {}},
            "f:labels": {"f:app.kubernetes.io/managed-by": {}},
            "f:ownerReferences": {"k:{\"uid\":\"svc-uid\"}": {}}
        },
        "f:spec": {
            "f:replicas": {},
            "f:selector": {},
            "f:template": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:containers": {
                        "k:{\"name\":\"engine\"}": {
                            ".": {},
                            "f:args": {},
                            "f:env": {"k:{\"name\":\"HF_HOME\"}": {".": {}, "f:name": {}, "f:value": {}}},
                            "f:image": {},
                            "f:name": {},
                            "f:ports": {"k:{\"containerPort\":8000,\"protocol\":\"TCP\"}":
                                        {".": {}, "f:containerPort": {}, "f:name": {}}},
                            "f:resources": {"f:limits": {"f:nvidia.com/gpu": {}}}
                        }
                    },
                    "f:tolerations": {}
                }
            }
        }
    })
}

fn entry(
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    fields: Value,
) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some(operation.into()),
        subresource: subresource.map(Into::into),
        fields_v1: Some(FieldsV1(fields)),
        ..ManagedFieldsEntry::default()
    }
}

fn owned(fields: Value) -> Owned {
    Owned::of(Some(&[entry("infergate", "Apply", None, fields)]))
}

/// `recorded()` with the path `at` removed (taken over, or removed).
fn without(at: &[&str]) -> Value {
    let mut fields = recorded();
    let (last, parents) = at.split_last().expect("a path");
    let mut node = &mut fields;
    for p in parents {
        node = node.get_mut(*p).expect("path");
    }
    node.as_object_mut().expect("object").remove(*last);
    fields
}

const ENGINE: [&str; 6] = [
    "f:spec",
    "f:template",
    "f:spec",
    "f:containers",
    "k:{\"name\":\"engine\"}",
    "",
];

fn engine(field: &str) -> Vec<&str> {
    let mut p = ENGINE.to_vec();
    *p.last_mut().expect("last") = field;
    p
}

#[test]
fn what_infergate_applied_is_covered_while_nobody_changes_it() {
    let held = owned(recorded());
    assert!(held.covers(&desired()));
    // Fields others add beside infergate's are theirs: not drift.
    let mut more = recorded();
    more["f:metadata"]["f:annotations"]["f:deployment.kubernetes.io/revision"] = json!({});
    assert!(owned(more).covers(&desired()));
    // An atomic list (args, tolerations) is held as a whole.
    let mut d = desired();
    d["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--port", "9000"]);
    assert!(held.covers(&d));
}

#[test]
fn a_field_taken_over_or_removed_is_not_covered() {
    for path in [
        engine("f:image"),
        vec!["f:spec", "f:replicas"],
        vec!["f:spec", "f:template", "f:spec", "f:tolerations"],
        vec!["f:metadata", "f:labels"],
    ] {
        assert!(!owned(without(&path)).covers(&desired()), "{path:?}");
    }
    // An env var's value taken over, an env var removed, a port removed.
    let mut env = engine("f:env");
    env.extend(["k:{\"name\":\"HF_HOME\"}", "f:value"]);
    assert!(!owned(without(&env)).covers(&desired()));
    // The last element of a keyed list gone: the API server records no
    // list at all.
    env.truncate(env.len() - 2);
    assert!(!owned(without(&env)).covers(&desired()));
    assert!(!owned(without(&engine("f:ports"))).covers(&desired()));
    // A port's name taken over.
    let mut port = engine("f:ports");
    port.extend(["k:{\"containerPort\":8000,\"protocol\":\"TCP\"}", "f:name"]);
    assert!(!owned(without(&port)).covers(&desired()));
    // A new env var infergate would add: not held yet.
    let mut d = desired();
    d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .expect("env")
        .push(json!({"name": "NEW", "value": "1"}));
    assert!(!owned(recorded()).covers(&d));
}

#[test]
fn only_infergates_apply_entry_of_the_main_resource_counts() {
    let d = desired();
    assert!(!Owned::of(None).covers(&d));
    assert!(!Owned::of(Some(&[entry("kubectl", "Apply", None, recorded())])).covers(&d));
    assert!(!Owned::of(Some(&[entry("infergate", "Update", None, recorded())])).covers(&d));
    assert!(
        !Owned::of(Some(&[entry(
            "infergate",
            "Apply",
            Some("status"),
            recorded()
        )]))
        .covers(&d)
    );
    let both = [
        entry(
            "kube-controller-manager",
            "Update",
            None,
            json!({"f:metadata": {}}),
        ),
        entry("infergate", "Apply", Some(""), recorded()),
    ];
    assert!(Owned::of(Some(&both)).covers(&d));
}

#[test]
fn a_services_port_key_carries_its_default_protocol() {
    let service = json!({
        "metadata": {"name": "chat"},
        "spec": {"selector": {"app": "chat"}, "ports": [{"name": "http", "port": 80, "targetPort": 8000}]}
    });
    let fields = json!({"f:spec": {
        "f:selector": {},
        "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}, "f:targetPort": {}}}
    }});
    assert!(owned(fields.clone()).covers(&service));
    let mut udp = service.clone();
    udp["spec"]["ports"][0]["protocol"] = json!("UDP");
    assert!(!owned(fields).covers(&udp));
}

#[test]
fn a_watch_keeps_only_infergates_entry_and_the_index_its_revision() {
    let meta = json!({
        "name": "chat", "namespace": "team", "resourceVersion": "7",
        "managedFields": [
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}},
            {"manager": "infergate", "operation": "Apply", "fieldsType": "FieldsV1",
             "fieldsV1": recorded()}
        ]
    });
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        #[serde(default, deserialize_with = "our_entry")]
        managed_fields: Option<Vec<ManagedFieldsEntry>>,
    }
    let kept: Meta = serde_json::from_value(meta.clone()).expect("decodes");
    let entries = kept.managed_fields.expect("ours");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].manager.as_deref(), Some("infergate"));
    let mut om: ObjectMeta = serde_json::from_value(meta).expect("meta");
    om.managed_fields = Some(entries);
    let held = Owned::take(&mut om);
    assert!(om.managed_fields.is_none());
    assert_eq!(held, owned(recorded()));
    assert!(held.len() > 20 && !held.is_empty());

    let index = OwnedIndex::default();
    index.record(&om, held);
    assert!(index.covers(&om, &desired()));
    // Another revision than the one indexed: not known to hold anything.
    let mut later = om.clone();
    later.resource_version = Some("8".into());
    assert!(!index.covers(&later, &desired()));
    index.forget(&om);
    assert!(index.is_empty() && !index.covers(&om, &desired()));
}
