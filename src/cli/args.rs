//! The command line's words: the subcommands and their arguments, as clap
//! parses them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::app;
use crate::check;
use crate::webhook::tls::certs;

/// Admission, conversion and reconciliation for model-serving workloads on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "infergate", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the mutating, validating and conversion webhooks over TLS and,
    /// unless --no-reconcile, run the reconciler with leader election.
    Serve(Box<ServeArgs>),
    /// Default and validate InferenceService manifests offline (for CI).
    ///
    /// Per-object results go to stderr as `FILE [doc N] KIND NS/NAME: FIELD: MESSAGE`;
    /// `-o yaml|json` prints the defaulted valid services on stdout. Unknown kinds are
    /// reported and skipped; v1alpha1 manifests are converted to v1beta1 first.
    ///
    /// Exit codes: 0 all valid, 1 violations found, 2 unreadable input or usage error.
    Check(CheckArgs),
    /// Print the CustomResourceDefinitions as YAML (what `crds/` holds).
    Crds(CrdsArgs),
    /// Generate a CA and a serving certificate for the given SANs.
    Certs(CertsArgs),
    /// Decode a protobuf serving graph, validate it as a DAG, and print the DAG
    /// and the generated Ray Serve `serveConfigV2`.
    ///
    /// Exit codes: 0 valid, 1 violations found, 2 unreadable input or usage error.
    Graph(GraphArgs),
    /// Print a ModelProfile read from a Hugging Face model's config.json, offline.
    ///
    /// GQA and MHA (Llama, Mistral, Qwen, Gemma, Phi-3, ...): kvHeads is num_key_value_heads
    /// (num_attention_heads when absent: MHA), headDim is head_dim (hidden_size /
    /// num_attention_heads when absent). MLA (DeepSeek V2/V3, any config with kv_lora_rank):
    /// kvLoraRank and qkRopeHeadDim. A multimodal config is read from its text_config.
    ///
    /// Exit codes: 0 printed, 2 unreadable file, invalid JSON, unknown
    /// model_type, missing field (named) or no weights size.
    #[command(after_help = PROFILE_EXAMPLES)]
    Profile(ProfileArgs),
}

/// Examples under `infergate profile --help`.
const PROFILE_EXAMPLES: &str = "Examples:
  infergate profile ./meta-llama/Llama-3.1-70B-Instruct > llama-70b.yaml
  kubectl apply -f llama-70b.yaml
  infergate profile ./config.json --weight-bytes 14483464192 \\
      --model-ref mistral-7b --model-ref mistralai/Mistral-7B-Instruct-v0.2 \\
      --kv-cache-bytes-per-element 1";

/// Flags of `infergate serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the TLS webhook listener.
    #[arg(long, default_value_t = app::DEFAULT_LISTEN, env = "INFERGATE_LISTEN")]
    pub listen: SocketAddr,
    /// Address of the plain-HTTP listener for /healthz, /readyz and /metrics.
    #[arg(long, default_value_t = app::DEFAULT_PROBE_LISTEN, env = "INFERGATE_PROBE_LISTEN")]
    pub probe_listen: SocketAddr,
    /// PEM serving certificate (chain); reloaded when the file changes.
    #[arg(long, requires = "tls_key_file", conflicts_with = "self_signed")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of the serving certificate; reloaded when the file changes.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// Generate and rotate the CA and serving certificate, keep them in a Secret,
    /// and inject the CA into the webhook configurations and the CRD.
    #[arg(long)]
    pub self_signed: bool,
    /// Extra IP SAN for the self-signed serving certificate (repeatable).
    #[arg(long = "cert-ip")]
    pub cert_ips: Vec<std::net::IpAddr>,
    /// Extra DNS SAN for the self-signed serving certificate (repeatable).
    #[arg(long = "cert-dns")]
    pub cert_dns: Vec<String>,
    /// Load policy objects from a file instead of watching the cluster (repeatable).
    #[arg(long = "policy-file")]
    pub policy_files: Vec<PathBuf>,
    /// Engine image used when no policy supplies one.
    #[arg(long, env = "INFERGATE_DEFAULT_ENGINE_IMAGE")]
    pub default_engine_image: Option<String>,
    /// Replicas used when neither the service nor a policy sets them.
    #[arg(long, env = "INFERGATE_DEFAULT_REPLICAS")]
    pub default_replicas: Option<i32>,
    /// Serve webhooks only; do not run the reconciler.
    #[arg(long)]
    pub no_reconcile: bool,
    /// Namespace of infergate's own objects (Secret, Lease).
    #[arg(long, env = "POD_NAMESPACE", default_value = app::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Extra CA certificates (PEM) trusted when fetching serving graphs.
    #[arg(long)]
    pub graph_ca_file: Option<PathBuf>,
    /// Prometheus base URL for rollout analyses (`spec.rollout.analysis`)
    /// when no ClusterInferencePolicy names one.
    #[arg(long, value_name = "URL")]
    pub prometheus_url: Option<String>,
    /// infergate's ServiceAccount (in --namespace): the subject of the
    /// RoleBinding a namespace creates to let infergate read its graph tokens.
    #[arg(long, env = "INFERGATE_SERVICE_ACCOUNT", default_value = "infergate")]
    pub service_account: String,
    /// Manage only these namespaces (comma-separated): services, policies
    /// and children are watched there only, so infergate needs Roles in
    /// them instead of cluster-wide rights (deploy/namespaced/). Default: all.
    #[arg(long, env = "INFERGATE_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text, env = "INFERGATE_LOG_FORMAT")]
    pub log_format: LogFormatArg,
    /// After SIGTERM, keep answering webhooks this long (while the pod's
    /// endpoint is removed from every API server's view), then stop
    /// accepting and finish in-flight requests.
    #[arg(long, default_value = "15s", value_parser = parse_duration, env = "INFERGATE_DRAIN_PERIOD")]
    pub drain_period: Duration,
    /// Most webhook connections open at once (lowered to what the open-files
    /// limit allows); at the limit the longest-idle connection is shed.
    #[arg(long, default_value_t = app::DEFAULT_MAX_CONNECTIONS, env = "INFERGATE_MAX_CONNECTIONS")]
    pub max_connections: usize,
    /// The container's memory limit in bytes, which sizes the budget of
    /// request bytes in flight (default: the cgroup's limit, if any).
    #[arg(long, env = "INFERGATE_MEMORY_LIMIT")]
    pub memory_limit: Option<u64>,
}

/// A duration flag: `15s`, `1m30s`, `500ms`, `0s`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::engine::duration::parse_go_duration(s)
}

/// Flags of `infergate check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Manifest files or directories to check; `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Policy manifests (ClusterInferencePolicy, InferencePolicy) to apply (repeatable).
    #[arg(long = "policy")]
    pub policies: Vec<PathBuf>,
    /// Labels of the namespace, for namespaceSelector matching: `k=v,k2=v2`.
    #[arg(long)]
    pub namespace_labels: Option<String>,
    /// Print the defaulted objects in this format.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<OutputFormatArg>,
    /// Print where each default came from.
    #[arg(long)]
    pub explain: bool,
    /// Engine image used when no policy supplies one (as `serve --default-engine-image`).
    #[arg(long)]
    pub default_engine_image: Option<String>,
    /// Replicas used when neither the service nor a policy sets them.
    #[arg(long)]
    pub default_replicas: Option<i32>,
}

/// Flags of `infergate crds`.
#[derive(Debug, Clone, Args)]
pub struct CrdsArgs {
    /// Print the API reference (Markdown, what `docs/api-reference.md` holds) instead.
    #[arg(long)]
    pub reference: bool,
}

/// Flags of `infergate certs`.
#[derive(Debug, Clone, Args)]
pub struct CertsArgs {
    /// Directory to write ca.crt, tls.crt and tls.key into.
    #[arg(long, default_value = ".")]
    pub out_dir: PathBuf,
    /// DNS subject alternative name of the serving certificate (repeatable).
    #[arg(long = "dns")]
    pub dns_names: Vec<String>,
    /// IP subject alternative name of the serving certificate (repeatable).
    #[arg(long = "ip")]
    pub ips: Vec<std::net::IpAddr>,
    /// Validity of the serving certificate in days.
    #[arg(long, default_value_t = certs::DEFAULT_DAYS)]
    pub days: u32,
    /// Also write the CA's private key, ca.key (mode 0600): only to issue
    /// more certificates from this CA later; otherwise nobody holds it.
    #[arg(long)]
    pub write_ca_key: bool,
}

/// Flags of `infergate graph`.
#[derive(Debug, Clone, Args)]
pub struct GraphArgs {
    /// The serving graph file (protobuf binary); `-` reads standard input.
    pub file: PathBuf,
    /// Route prefix of the generated Ray Serve application.
    #[arg(long, default_value = check::graph::DEFAULT_ROUTE_PREFIX)]
    pub route_prefix: String,
    /// An InferenceService manifest: check that one of its workers can hold
    /// every deployment (num_gpus, num_cpus, memory), as the reconciler does.
    #[arg(long)]
    pub service: Option<PathBuf>,
    /// Policy manifests to default --service with (repeatable).
    #[arg(long = "policy", requires = "service")]
    pub policies: Vec<PathBuf>,
    /// Labels of the service's namespace for namespaceSelector matching: k=v,...
    #[arg(long, requires = "service")]
    pub namespace_labels: Option<String>,
}

/// Flags of `infergate profile`.
#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    /// The model's directory (holding config.json), or its config.json.
    #[arg(value_name = "DIR|config.json")]
    pub path: PathBuf,
    /// Bytes of the weights as served. Default: metadata.total_size of model.safetensors.index.json
    /// beside config.json, else the size on disk of model.safetensors (its header included).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    pub weight_bytes: Option<i64>,
    /// A spec.model.ref of the profile (repeatable). Default: `ORG/NAME` from the directory's
    /// last two path components, or from a Hugging Face cache directory `models--ORG--NAME`.
    #[arg(long = "model-ref", value_name = "REF")]
    pub model_refs: Vec<String>,
    /// metadata.name of the profile. Default: the first model ref lowercased, every character
    /// other than a letter or digit (`.`, `_`, `/`, ...) turned into `-`.
    #[arg(long)]
    pub name: Option<String>,
    /// spec.kvCacheBytesPerElement: bytes of one KV cache element (1 for an
    /// fp8 cache). Default: unset, which means 2 (fp16/bf16).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..=8))]
    pub kv_cache_bytes_per_element: Option<i32>,
}

/// Output formats of `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormatArg {
    /// YAML documents.
    Yaml,
    /// JSON.
    Json,
}

/// Log formats of `serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}
