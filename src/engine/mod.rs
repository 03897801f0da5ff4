//! Pure logic: policy resolution, defaulting with provenance, validation
//! with field errors, route templates, durations and derived names.
//! No I/O, no async, no `kube::Client`.
