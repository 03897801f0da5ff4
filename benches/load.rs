//! Load driver for the webhook server (placeholder until written).
fn main() {}
