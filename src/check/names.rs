//! Served names offline: the services under check hold their names in the
//! order given, as admission records them one by one, so the later of two
//! services serving one name through one Gateway (with hostnames that
//! meet) is denied, whatever files and namespaces they come from.

use crate::api::v1beta1::InferenceService;
use crate::engine::Verdict;
use crate::engine::model_names::{Claim, claims, clash_error};

/// The names held so far (offline: no ledger is read or written).
#[derive(Debug, Default)]
pub struct Names {
    /// `(namespace, name, claims)` of each service holding names, in input order.
    held: Vec<(String, String, Vec<Claim>)>,
}

/// `(namespace, name)` of a service.
fn key(svc: &InferenceService) -> (String, String) {
    (
        svc.metadata.namespace.clone().unwrap_or_default(),
        svc.metadata.name.clone().unwrap_or_default(),
    )
}

impl Names {
    /// The denials of `svc`'s names that an earlier service holds: one per
    /// clashing field, each naming the first holder (by name only in
    /// `svc`'s namespace). The same service given again is not its own
    /// holder: the later copy replaces it, as an update would.
    #[must_use]
    pub fn check(&self, svc: &InferenceService) -> Verdict {
        let (ns, name) = key(svc);
        let mut v = Verdict::default();
        let mut fields: Vec<&str> = Vec::new();
        for mine in &claims(svc) {
            if fields.contains(&mine.field.as_str()) {
                continue;
            }
            let holder = self
                .held
                .iter()
                .filter(|(h_ns, h_name, _)| (h_ns, h_name) != (&ns, &name))
                .find(|(_, _, theirs)| theirs.iter().any(|t| mine.meets(t)));
            if let Some((h_ns, h_name, _)) = holder {
                fields.push(mine.field.as_str());
                v.errors.push(clash_error(mine, (h_ns, h_name), &ns));
            }
        }
        v
    }

    /// Record `svc`'s names (a service it replaces gives its own up).
    pub fn record(&mut self, svc: &InferenceService) {
        let (ns, name) = key(svc);
        self.held
            .retain(|(h_ns, h_name, _)| (h_ns, h_name) != (&ns, &name));
        let mine = claims(svc);
        if !mine.is_empty() {
            self.held.push((ns, name, mine));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(
        ns: &str,
        name: &str,
        routing: serde_json::Value,
        adapters: &[&str],
    ) -> InferenceService {
        let adapters: Vec<_> = adapters
            .iter()
            .map(|a| json!({"name": a, "source": format!("org/{a}")}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"namespace": ns, "name": name},
            "spec": {
                "model": {"ref": "llama-3-70b", "adapters": adapters},
                "routing": routing,
            },
        }))
        .expect("service decodes")
    }

    fn by_name(gateway: &str, hostnames: &[&str]) -> serde_json::Value {
        json!({
            "match": "ModelName",
            "gateway": {"name": gateway, "namespace": "gateways"},
            "hostnames": hostnames,
        })
    }

    fn errors(v: &Verdict) -> Vec<String> {
        v.errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_later_of_two_services_serving_one_name_is_denied() {
        let mut names = Names::default();
        let first = svc("team-a", "chat", by_name("gw", &[]), &[]);
        assert!(names.check(&first).allowed());
        names.record(&first);
        let same_ns = svc("team-a", "chat-2", by_name("gw", &[]), &[]);
        assert_eq!(
            errors(&names.check(&same_ns)),
            [
                "spec.model.servedName: Duplicate value: \"llama-3-70b\": served through Gateway gateways/gw by team-a/chat"
            ]
        );
        let other_ns = svc("team-b", "chat", by_name("gw", &[]), &[]);
        let said = errors(&names.check(&other_ns)).join("\n");
        assert!(said.contains("by a service in another namespace"), "{said}");
        assert!(!said.contains("team-a"), "{said}");
    }

    #[test]
    fn another_gateway_disjoint_hostnames_or_a_path_route_hold_nothing_in_common() {
        let mut names = Names::default();
        let first = svc("team-a", "chat", by_name("gw", &["a.example.com"]), &[]);
        names.record(&first);
        for ok in [
            svc("team-a", "other-gw", by_name("gw-2", &[]), &[]),
            svc(
                "team-a",
                "other-host",
                by_name("gw", &["b.example.com"]),
                &[],
            ),
            svc(
                "team-a",
                "by-path",
                json!({"gateway": {"name": "gw", "namespace": "gateways"}}),
                &[],
            ),
        ] {
            assert!(
                names.check(&ok).allowed(),
                "{:?}",
                errors(&names.check(&ok))
            );
        }
        // Every hostname meets a.example.com.
        let every = svc("team-a", "every-host", by_name("gw", &[]), &[]);
        assert!(!names.check(&every).allowed());
    }

    #[test]
    fn an_adapter_clashes_with_a_base_name_and_a_service_is_not_its_own_holder() {
        let mut names = Names::default();
        let first = svc("team-a", "chat", by_name("gw", &[]), &["sql-lora"]);
        names.record(&first);
        // The same service again (an update) holds what it held.
        assert!(names.check(&first).allowed());
        let mut second = svc("team-a", "sql", by_name("gw", &[]), &[]);
        second.spec.model.served_name = Some("sql-lora".to_owned());
        assert_eq!(
            errors(&names.check(&second)),
            [
                "spec.model.servedName: Duplicate value: \"sql-lora\": served through Gateway gateways/gw by team-a/chat"
            ]
        );
        let mut third = svc("team-a", "third", by_name("gw", &[]), &["x", "sql-lora"]);
        third.spec.model.served_name = Some("base-3".to_owned());
        assert_eq!(
            errors(&names.check(&third)),
            [
                "spec.model.adapters[1].name: Duplicate value: \"sql-lora\": served through Gateway gateways/gw by team-a/chat"
            ]
        );
        // Once the holder serves other names, the name is free.
        let mut moved = first.clone();
        moved.spec.model.adapters.clear();
        names.record(&moved);
        assert!(names.check(&second).allowed());
    }
}
