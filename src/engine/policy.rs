//! Policy resolution: which policies apply, in which order.
