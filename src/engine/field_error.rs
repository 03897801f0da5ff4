//! Field errors in the Kubernetes style (a field path, a `StatusCause`
//! reason and a message).

use std::fmt;

/// Kubernetes StatusCause reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorReason {
    /// `FieldValueRequired`
    Required,
    /// `FieldValueInvalid`
    Invalid,
    /// `FieldValueForbidden`
    Forbidden,
    /// `FieldValueTooLong`
    TooLong,
    /// `FieldValueNotSupported`
    NotSupported,
    /// `FieldValueDuplicate`
    Duplicate,
    /// `FieldValueNotFound`
    NotFound,
    /// `FieldValueTooMany`
    TooMany,
}

impl FieldErrorReason {
    /// The `StatusCause.reason` string.
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Duplicate => "FieldValueDuplicate",
            Self::NotFound => "FieldValueNotFound",
            Self::TooMany => "FieldValueTooMany",
        }
    }
}

/// One field error in the Kubernetes style.
///
/// `Display` = `spec.canary.weight: Invalid value: 120: must be at most 50 (ClusterInferencePolicy "platform")`;
/// `message` holds everything after `field: `.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Field path such as `spec.canary.weight`.
    pub field: String,
    /// The StatusCause reason.
    pub reason: FieldErrorReason,
    /// The message after the field path (`Invalid value: 120: must be at most 50`).
    pub message: String,
}

impl FieldError {
    /// `field: Invalid value: <value>: detail`.
    #[must_use]
    pub fn invalid(field: impl Into<String>, value: impl fmt::Display, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::Invalid,
            message: format!("Invalid value: {value}: {detail}"),
        }
    }

    /// `field: Required value: detail`.
    #[must_use]
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::Required,
            message: if detail.is_empty() {
                "Required value".to_owned()
            } else {
                format!("Required value: {detail}")
            },
        }
    }

    /// `field: Forbidden: detail`.
    #[must_use]
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::Forbidden,
            message: format!("Forbidden: {detail}"),
        }
    }

    /// `field: Too long: detail`.
    #[must_use]
    pub fn too_long(field: impl Into<String>, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::TooLong,
            message: format!("Too long: {detail}"),
        }
    }

    /// `field: Unsupported value: <value>: supported values: ...`.
    #[must_use]
    pub fn not_supported(
        field: impl Into<String>,
        value: impl fmt::Display,
        supported: &[&str],
        suffix: &str,
    ) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            field: field.into(),
            reason: FieldErrorReason::NotSupported,
            message: format!("Unsupported value: \"{value}\": supported values: {list}{suffix}"),
        }
    }

    /// `field: Not found: <value>`.
    #[must_use]
    pub fn not_found(field: impl Into<String>, value: impl fmt::Display) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::NotFound,
            message: format!("Not found: {value}"),
        }
    }

    /// `Too many: <detail>`.
    #[must_use]
    pub fn too_many(field: impl Into<String>, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::TooMany,
            message: format!("Too many: {detail}"),
        }
    }

    /// `Duplicate value: <value>: <detail>`.
    #[must_use]
    pub fn duplicate(field: impl Into<String>, value: impl fmt::Display, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: FieldErrorReason::Duplicate,
            message: format!("Duplicate value: {value}: {detail}"),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for FieldError {}
