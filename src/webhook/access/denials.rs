//! The field errors of a reference the requester may not use, or that
//! could not be checked: who, may not do what, and why.

use k8s_openapi::api::authentication::v1::UserInfo;

use crate::engine::FieldError;
use crate::engine::references::Reference;

fn who(user: &UserInfo) -> String {
    format!("{:?}", user.username.as_deref().unwrap_or("<anonymous>"))
}

fn what(r: &Reference, namespace: &str) -> String {
    let (verb, resource, subresource) = r.kind.access();
    let on = if subresource.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}/{subresource}")
    };
    format!(
        "{verb} {on} for {} {:?} in namespace {namespace:?}",
        r.kind, r.name
    )
}

/// The user may not use `r`: the authorizer's `reason`, when it gave one.
pub(super) fn denial(user: &UserInfo, namespace: &str, r: &Reference, reason: &str) -> FieldError {
    let mut detail = format!(
        "user {} may not {}: infergate's pods may use only what the requester may use",
        who(user),
        what(r, namespace)
    );
    if !reason.is_empty() {
        detail.push_str(&format!(" ({reason})"));
    }
    FieldError::forbidden(r.field.clone(), &detail)
}

/// Whether the user may use `r` is not known (`why`): denied.
pub(super) fn unchecked(user: &UserInfo, namespace: &str, r: &Reference, why: &str) -> FieldError {
    FieldError::forbidden(
        r.field.clone(),
        &format!(
            "could not check whether user {} may {}: {why}; denied (infergate fails closed)",
            who(user),
            what(r, namespace)
        ),
    )
}
