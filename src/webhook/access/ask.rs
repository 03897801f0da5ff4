//! One question put to the API server: the SubjectAccessReview made for
//! the requester's whole `userInfo`, and the [`AccessDecision`] read from it.

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::engine::references::Reference;

/// What the API server said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum AccessDecision {
    Allowed,
    /// Denied, with the authorizer's reason when it gave one.
    Denied(String),
}

/// Ask whether `user` may use `r` in `namespace`.
pub(super) async fn ask(
    api: &Api<SubjectAccessReview>,
    user: &UserInfo,
    namespace: &str,
    r: &Reference,
) -> Result<AccessDecision, kube::Error> {
    let (verb, resource, subresource) = r.kind.access();
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_owned()),
                verb: Some(verb.to_owned()),
                group: Some(String::new()),
                resource: Some(resource.to_owned()),
                subresource: (!subresource.is_empty()).then(|| subresource.to_owned()),
                name: Some(r.name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = api.create(&PostParams::default(), &review).await?;
    let status = answer.status.unwrap_or_default();
    Ok(if status.allowed && status.denied != Some(true) {
        AccessDecision::Allowed
    } else {
        AccessDecision::Denied(status.reason.unwrap_or_default())
    })
}
