//! Kubernetes LabelSelector matching (matchLabels and matchExpressions).
