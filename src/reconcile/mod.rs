//! The co-located reconciler: desired-state builders, apply, status, leader election.
