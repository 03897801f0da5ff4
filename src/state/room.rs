//! Free devices per AcceleratorClass, known from watches (API section 14):
//! a watch of every node and one of the bound, non-terminal pods, each
//! decoded only as far as free devices read it, folded into one index
//! that answers [`Room::free`] without an API call.
//!
//! - [`decode`]: what the watches decode of a Node ([`RoomNode`]) and of a
//!   Pod ([`RoomPod`]): labels, readiness, blocking taints and extended
//!   allocatable; node, phase and effective extended requests;
//! - [`index`]: [`Room`], the nodes and the pods that request an extended
//!   resource, updated per event;
//! - [`watch`]: the two watches that fill it.

pub mod decode;
pub mod index;
pub mod watch;

pub use decode::{RoomNode, RoomPod};
pub use index::Room;
