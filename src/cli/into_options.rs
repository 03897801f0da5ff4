//! Each subcommand's arguments turned into the plain options struct of the
//! module that does the work.

use super::args::{
    CertsArgs, CheckArgs, GraphArgs, LogFormatArg, OutputFormatArg, ProfileArgs, ServeArgs,
};
use crate::app;
use crate::check::{self, OutputFormat};
use crate::engine::ServerDefaults;
use crate::telemetry::LogFormat;
use crate::webhook::tls::certs;

impl From<LogFormatArg> for LogFormat {
    fn from(f: LogFormatArg) -> Self {
        match f {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        }
    }
}

impl From<OutputFormatArg> for OutputFormat {
    fn from(f: OutputFormatArg) -> Self {
        match f {
            OutputFormatArg::Yaml => OutputFormat::Yaml,
            OutputFormatArg::Json => OutputFormat::Json,
        }
    }
}

impl From<ServeArgs> for app::Options {
    fn from(a: ServeArgs) -> Self {
        let certificates = match (a.tls_cert_file, a.tls_key_file, a.self_signed) {
            (Some(cert), Some(key), _) => Some(app::Certificates::Files { cert, key }),
            (_, _, true) => Some(app::Certificates::SelfSigned {
                dns_names: a.cert_dns,
                ips: a.cert_ips,
            }),
            _ => None,
        };
        app::Options {
            listen: a.listen,
            probe_listen: a.probe_listen,
            certificates,
            policy_files: a.policy_files,
            server_defaults: ServerDefaults {
                engine_image: a.default_engine_image,
                replicas: a.default_replicas,
            },
            reconcile: !a.no_reconcile,
            namespace: a.namespace,
            graph_ca_file: a.graph_ca_file,
            prometheus_url: a.prometheus_url,
            service_account: a.service_account,
            namespaces: a.namespaces,
            log_format: a.log_format.into(),
            drain_period: a.drain_period,
            max_connections: a.max_connections,
            memory_limit: a.memory_limit,
        }
    }
}

impl From<CheckArgs> for check::Options {
    fn from(a: CheckArgs) -> Self {
        check::Options {
            files: a.files,
            policies: a.policies,
            namespace_labels: a.namespace_labels,
            output: a.output.map(Into::into),
            explain: a.explain,
            server_defaults: ServerDefaults {
                engine_image: a.default_engine_image,
                replicas: a.default_replicas,
            },
        }
    }
}

impl From<CertsArgs> for certs::Options {
    fn from(a: CertsArgs) -> Self {
        certs::Options {
            out_dir: a.out_dir,
            dns_names: a.dns_names,
            ips: a.ips,
            days: a.days,
            write_ca_key: a.write_ca_key,
        }
    }
}

impl From<GraphArgs> for check::graph::Options {
    fn from(a: GraphArgs) -> Self {
        check::graph::Options {
            file: a.file,
            route_prefix: a.route_prefix,
            service: a.service,
            policies: a.policies,
            namespace_labels: a.namespace_labels,
        }
    }
}

impl From<ProfileArgs> for crate::profile::Options {
    fn from(a: ProfileArgs) -> Self {
        crate::profile::Options {
            path: a.path,
            weight_bytes: a.weight_bytes,
            name: a.name,
            model_refs: a.model_refs,
            kv_cache_bytes_per_element: a.kv_cache_bytes_per_element,
        }
    }
}
