//! Prometheus metrics (prometheus-client).
