//! The API server a plugin command talks to, chosen like kubectl does:
//! `--kubeconfig` (else `KUBECONFIG`, else `~/.kube/config`), `--context`,
//! `-n` (else the context's namespace, else `default`).

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Where to connect, from the global flags.
#[derive(Clone, Debug, Default)]
pub struct Connection {
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`.
    pub context: Option<String>,
    /// `-n/--namespace`.
    pub namespace: Option<String>,
}

/// A client and the namespace commands act in.
#[derive(Clone)]
pub struct Target {
    /// The client.
    pub client: kube::Client,
    /// `-n`, else the context's namespace, else `default`.
    pub namespace: String,
}

/// Why a plugin command could not run.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig: {0}")]
    Config(String),
    /// The API server answered with an error.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// The object does not exist.
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        /// The kind.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// Anything else the command cannot go on with.
    #[error("{0}")]
    Other(String),
}

impl Connection {
    /// Connect as kubectl would.
    pub async fn connect(&self) -> Result<Target, PluginError> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kc = Kubeconfig::read_from(path)
                    .map_err(|e| PluginError::Config(format!("{}: {e}", path.display())))?;
                kube::Config::from_custom_kubeconfig(kc, &options).await
            }
            None => kube::Config::from_kubeconfig(&options).await,
        }
        .map_err(|e| PluginError::Config(e.to_string()))?;
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client =
            kube::Client::try_from(config).map_err(|e| PluginError::Config(e.to_string()))?;
        Ok(Target { client, namespace })
    }
}
