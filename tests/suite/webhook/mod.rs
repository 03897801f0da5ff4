//! The webhook server without a cluster: AdmissionReview and ConversionReview
//! fixtures sent through the router in process, the probe endpoints, and the
//! TLS listener over 127.0.0.1 with rcgen certificates, including rotation
//! under load and graceful shutdown. A module per concern.

mod answers;
mod bad_input;
mod convert;
mod cost;
mod mutate;
mod probes;
mod registrations;
mod serve;
mod tls;
mod validate;
