//! The status messages that carry facts another component reads back:
//! a track's ready replicas, a crash-looping container's last exit code,
//! the Secret a graph's token is in, the command that lets infergate read
//! it, and why a rollout's step holds. The reconciler and the graph
//! resolver write them with these formatters; `kubectl infergate why` (and
//! the rollout, of its own hold) reads them with these parsers; the round
//! trips are tested below. Everything else in a message is prose.

use std::fmt;

use super::names::Track;

/// `{ready}/{desired} replicas ready`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replicas {
    /// Ready replicas.
    pub ready: i32,
    /// Wanted replicas.
    pub desired: i32,
}

impl fmt::Display for Replicas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} replicas ready", self.ready, self.desired)
    }
}

impl Replicas {
    /// The replicas `text` says, when it is exactly what [`Display`](fmt::Display) writes.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let (ready, desired) = text.strip_suffix(" replicas ready")?.split_once('/')?;
        let replicas = Self {
            ready: ready.parse().ok()?,
            desired: desired.parse().ok()?,
        };
        // `+1` or `01` parse too: only the text written is read.
        (replicas.to_string() == text).then_some(replicas)
    }
}

/// What `Ready=False` says about the track that blocks it: `{track}:
/// {replicas}: {detail}` when its pods say why (the scheduler's, the
/// kubelet's words), `{track}: {replicas}; {detail}` while they start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackMessage<'a> {
    /// The track short of ready replicas.
    pub track: Track,
    /// Its replicas, when the message gives them.
    pub replicas: Option<Replicas>,
    /// What its pods say (the whole rest of the message).
    pub detail: &'a str,
}

impl<'a> TrackMessage<'a> {
    /// `{track}: {replicas}: {detail}`: the pods say why they do not run.
    #[must_use]
    pub fn blocked(track: Track, replicas: Replicas, detail: impl fmt::Display) -> String {
        format!("{track}: {replicas}: {detail}")
    }

    /// `{track}: {replicas}; {detail}`: the pods are on their way.
    #[must_use]
    pub fn waiting(track: Track, replicas: Replicas, detail: impl fmt::Display) -> String {
        format!("{track}: {replicas}; {detail}")
    }

    /// The track, replicas and detail of a message of either shape (a
    /// `{track}: {detail}` without replicas too); `None` for a message
    /// that names no track.
    #[must_use]
    pub fn parse(message: &'a str) -> Option<Self> {
        let (track, rest) = message.split_once(": ")?;
        let track = track.parse().ok()?;
        let split = |sep| {
            let (replicas, detail) = rest.split_once(sep)?;
            Some((Replicas::parse(replicas)?, detail))
        };
        let (replicas, detail) = match split(": ").or_else(|| split("; ")) {
            Some((replicas, detail)) => (Some(replicas), detail),
            None => (None, rest),
        };
        Some(Self {
            track,
            replicas,
            detail,
        })
    }
}

/// The words before a crash-looping container's last exit code.
const LAST_EXIT_CODE: &str = "last exit code ";

/// `container "NAME" is crash-looping (last exit code N[, REASON])`.
#[must_use]
pub fn crash_looping(container: &str, exit_code: i32, reason: &str) -> String {
    if reason.is_empty() {
        format!("container {container:?} is crash-looping ({LAST_EXIT_CODE}{exit_code})")
    } else {
        format!("container {container:?} is crash-looping ({LAST_EXIT_CODE}{exit_code}, {reason})")
    }
}

/// The exit code a [`crash_looping`] text gives, wherever it is in `text`.
#[must_use]
pub fn exit_code(text: &str) -> Option<i64> {
    let rest = &text[text.find(LAST_EXIT_CODE)? + LAST_EXIT_CODE.len()..];
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}

/// `secret NAMESPACE/NAME`, as a graph's messages name the Secret holding
/// its token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SecretRef<'a> {
    /// The Secret's namespace.
    pub namespace: &'a str,
    /// The Secret's name.
    pub name: &'a str,
}

impl<'a> SecretRef<'a> {
    /// The Secret `namespace/name`.
    #[must_use]
    pub fn new(namespace: &'a str, name: &'a str) -> Self {
        Self { namespace, name }
    }

    /// The first Secret `message` names.
    #[must_use]
    pub fn find_in(message: &'a str) -> Option<Self> {
        let rest = &message[message.find("secret ")? + "secret ".len()..];
        let word = rest.split([' ', ':', ',', ';']).next()?;
        let (namespace, name) = word.split_once('/')?;
        Some(Self { namespace, name })
    }
}

impl fmt::Display for SecretRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "secret {}/{}", self.namespace, self.name)
    }
}

/// The command that lets infergate read the Secrets of `namespace`: a
/// RoleBinding of the `infergate-graph-token-reader` ClusterRole to
/// infergate's ServiceAccount (`namespace:name`). A message ends with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantTokenReader<'a> {
    /// The namespace that allows it.
    pub namespace: &'a str,
    /// infergate's ServiceAccount as `namespace:name`.
    pub service_account: &'a str,
}

impl<'a> GrantTokenReader<'a> {
    /// The command for `namespace` and infergate's `service_account`.
    #[must_use]
    pub fn new(namespace: &'a str, service_account: &'a str) -> Self {
        Self {
            namespace,
            service_account,
        }
    }
}

impl fmt::Display for GrantTokenReader<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kubectl create rolebinding infergate-graph-token-reader --namespace {} --clusterrole infergate-graph-token-reader --serviceaccount {}",
            self.namespace, self.service_account
        )
    }
}

/// The command a message ends with (from its first `kubectl ` on).
#[must_use]
pub fn command_in(message: &str) -> Option<&str> {
    message
        .find("kubectl ")
        .map(|i| message[i..].trim_end_matches('.'))
}

/// `status.rollout.message` of a step its gate holds past its soak:
/// `{why}; holding at weight {weight} (at most {deadline} after the step
/// started)`.
pub struct Hold;

impl Hold {
    /// Where the message's `why` ends.
    const END_OF_WHY: &'static str = "; holding";

    /// The message of a step held for `why` at `weight`, at most until `deadline`.
    #[must_use]
    pub fn format(why: &str, weight: i32, deadline: &str) -> String {
        format!(
            "{why}{} at weight {weight} (at most {deadline} after the step started)",
            Self::END_OF_WHY
        )
    }

    /// The `why` of a [`Hold::format`] message (all of another message).
    #[must_use]
    pub fn why(message: &str) -> &str {
        message.split(Self::END_OF_WHY).next().unwrap_or(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_track_message_round_trips() {
        let replicas = Replicas {
            ready: 0,
            desired: 3,
        };
        for track in Track::ALL {
            let detail = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu; preemption: 0/3";
            let m = TrackMessage::blocked(*track, replicas, detail);
            assert_eq!(
                TrackMessage::parse(&m),
                Some(TrackMessage {
                    track: *track,
                    replicas: Some(replicas),
                    detail
                })
            );
            let detail = "container \"engine\" waits: ContainerCreating: pulling: 1/2";
            let m = TrackMessage::waiting(*track, replicas, detail);
            assert_eq!(
                TrackMessage::parse(&m),
                Some(TrackMessage {
                    track: *track,
                    replicas: Some(replicas),
                    detail
                })
            );
        }
        for (ready, desired) in [(0, 0), (-1, 2), (i32::MAX, i32::MIN)] {
            let r = Replicas { ready, desired };
            assert_eq!(Replicas::parse(&r.to_string()), Some(r));
        }
        assert_eq!(
            TrackMessage::parse("canary: pods are starting"),
            Some(TrackMessage {
                track: Track::Canary,
                replicas: None,
                detail: "pods are starting"
            })
        );
        assert_eq!(TrackMessage::parse("2/2 primary replicas ready"), None);
        assert_eq!(TrackMessage::parse("workers: 1/2 replicas ready: x"), None);
        assert_eq!(Replicas::parse("+1/2 replicas ready"), None);
    }

    #[test]
    fn an_exit_code_round_trips() {
        for code in [0, 1, 137, -1, i32::MAX, i32::MIN] {
            for reason in ["", "Error", "OOMKilled"] {
                let text = crash_looping("engine", code, reason);
                assert_eq!(exit_code(&text), Some(i64::from(code)), "{text}");
            }
        }
        assert_eq!(
            crash_looping("engine", 1, "Error"),
            "container \"engine\" is crash-looping (last exit code 1, Error)"
        );
        assert_eq!(exit_code("exited"), None);
    }

    #[test]
    fn a_secret_and_a_command_round_trip() {
        let secret = SecretRef::new("team-a", "graph-token");
        let grant = GrantTokenReader {
            namespace: "team-a",
            service_account: "infergate-system:infergate",
        };
        let message = format!(
            "infergate may not read {secret}: the namespace has not allowed it; to allow it: {grant}"
        );
        assert_eq!(SecretRef::find_in(&message), Some(secret));
        assert_eq!(command_in(&message), Some(grant.to_string().as_str()));
        for tail in [" (spec)", ": no", ", x", "; y", ""] {
            let message = format!("{secret}{tail}");
            assert_eq!(SecretRef::find_in(&message), Some(secret), "{message}");
        }
        assert_eq!(SecretRef::find_in("no Secret here"), None);
        assert_eq!(command_in("nothing to run."), None);
    }

    #[test]
    fn a_hold_round_trips() {
        for why in [
            "the analysis query returned no sample",
            "no address: set one",
            "",
        ] {
            let message = Hold::format(why, 10, "30m");
            assert_eq!(Hold::why(&message), why, "{message}");
        }
        assert_eq!(
            Hold::format("no sample", 10, "30m"),
            "no sample; holding at weight 10 (at most 30m after the step started)"
        );
        assert_eq!(Hold::why("other words"), "other words");
    }
}
