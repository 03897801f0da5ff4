//! The API server asked about a controlling service the watch cache does
//! not confirm ([`Owners`]), within [`LOOKUP_TIMEOUT`].

use std::time::Duration;

use super::needs::Needs;
use crate::api::v1beta1::InferenceService;

/// How long the API server is asked about a service before the write is
/// denied as unconfirmed (well within the webhook's `timeoutSeconds: 5`).
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// Asks the API server for a service when the cache does not confirm a
/// write (a replica whose watch is behind, a service just recreated).
#[derive(Clone, Default)]
pub struct Owners {
    client: Option<kube::Client>,
}

impl std::fmt::Debug for Owners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owners")
            .field("can_ask", &self.client.is_some())
            .finish()
    }
}

impl Owners {
    /// Ask with `client`; without one (tests, `check`), the cache decides.
    #[must_use]
    pub fn new(client: Option<kube::Client>) -> Self {
        Owners { client }
    }

    /// Whether there is an API server to ask.
    #[must_use]
    pub fn can_ask(&self) -> bool {
        self.client.is_some()
    }

    /// The service `namespace/name` as the API server has it now, within
    /// [`LOOKUP_TIMEOUT`].
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<InferenceService>, String> {
        let Some(client) = &self.client else {
            return Err("no API server to ask".to_owned());
        };
        let api = kube::Api::<InferenceService>::namespaced(client.clone(), namespace);
        match tokio::time::timeout(LOOKUP_TIMEOUT, api.get_opt(name)).await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(e)) => Err(format!("reading InferenceService {namespace}/{name}: {e}")),
            Err(_) => Err(format!(
                "reading InferenceService {namespace}/{name} took more than {LOOKUP_TIMEOUT:?}"
            )),
        }
    }

    /// Settle `needs` with the API server's answer: `Ok` to admit, `Err`
    /// with the message of the denial.
    pub async fn settle(&self, needs: &Needs) -> Result<(), String> {
        let (namespace, name) = needs.owner();
        match self.get(namespace, name).await {
            Ok(found) => needs.check(found.as_ref()).map_err(|r| needs.denial(&r)),
            Err(e) => Err(needs.denial(&format!(
                "its controlling InferenceService could not be confirmed ({e}); retry"
            ))),
        }
    }
}
