//! Replies of the subject protocol (docs/subject-protocol.md): one struct of optional fields, read
//! and then held to the shape its request calls for ([`Reply::check_shape`]), because replies carry
//! no tag of their own.
//!
//! Promise: unknown fields are refused, and a reply of the wrong shape for its request is an
//! error naming what is missing or extra, never a silent default.

use serde::{Deserialize, Serialize};

use bucketproof_trace::profile::Profile;

use crate::wire::{
    Capabilities, Request, RetryProbe, WireAmount, WireError, WirePart, WireState, WireWait,
};

/// Any reply: the union of every reply's fields, each optional here; [`Reply::check_shape`] holds it
/// to its request's shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// The request's id.
    pub id: u64,
    /// `hello`: the chosen version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
    /// `hello`: the subject's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `hello`: its version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `hello`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    /// `hello`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    /// `setup`, `reconfigure`, `forget`, `sweep`, `reset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// `acquire`, `settle`, `would_allow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<bool>,
    /// `acquire`, `settle`: optional, for a subject that has no balance to show (absent or null:
    /// the balance is not judged, the decision is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<WireAmount>,
    /// `acquire`, `settle`: present (possibly null).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub retry_after_ns: Option<Option<WireWait>>,
    /// `acquire`, `settle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_after_ns: Option<WireWait>,
    /// `acquire` or `settle` on a key of several bandwidths: each bandwidth's part, in the config's order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidths: Option<Vec<WirePart>>,
    /// `acquire`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// `acquire`, `settle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed: Option<bool>,
    /// `acquire`, `settle`, `reconfigure` with `inspect`: present (possibly null).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub before: Option<Option<WireState>>,
    /// As `before`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub after: Option<Option<WireState>>,
    /// `acquire` with `probe_retry`, for a finite denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryProbe>,
    /// `inspect`: present (possibly null).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub state: Option<Option<WireState>>,
    /// Any request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WireError>,
}

/// A field that is present, possibly as `null`: `Some(None)` for null, `None` only when absent.
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

impl Reply {
    /// The names of the fields that are set, besides `id`.
    fn fields(&self) -> Vec<&'static str> {
        let mut set = Vec::new();
        let mut note = |name, is_set: bool| {
            if is_set {
                set.push(name);
            }
        };
        note("protocol", self.protocol.is_some());
        note("name", self.name.is_some());
        note("version", self.version.is_some());
        note("capabilities", self.capabilities.is_some());
        note("profile", self.profile.is_some());
        note("ok", self.ok.is_some());
        note("allowed", self.allowed.is_some());
        note("remaining", self.remaining.is_some());
        note("retry_after_ns", self.retry_after_ns.is_some());
        note("reset_after_ns", self.reset_after_ns.is_some());
        note("created", self.created.is_some());
        note("replayed", self.replayed.is_some());
        note("before", self.before.is_some());
        note("after", self.after.is_some());
        note("retry", self.retry.is_some());
        note("state", self.state.is_some());
        set
    }

    /// Holds a non-error reply to the shape of `request`: every required field present, no field
    /// of another reply. `Err` names what is wrong.
    pub fn check_shape(&self, request: &Request) -> Result<(), String> {
        let inspected = matches!(
            request,
            Request::Acquire { inspect: true, .. }
                | Request::Settle { inspect: true, .. }
                | Request::Reconfigure { inspect: true, .. }
        );
        if self.error.is_some() {
            // An error changes nothing; with `inspect` it still shows the state around it, so the
            // invariant oracle can check that.
            let allowed: &[&str] = if inspected { &["before", "after"] } else { &[] };
            let fields = self.fields();
            if let Some(missing) = allowed.iter().find(|name| !fields.contains(name)) {
                return Err(format!(
                    "the error reply to {} has no {missing:?}",
                    request.op()
                ));
            }
            return match fields.iter().find(|name| !allowed.contains(name)) {
                None => Ok(()),
                Some(other) => Err(format!("an error reply also has {other:?}")),
            };
        }
        let (required, optional): (&[&str], &[&str]) = match request {
            Request::Hello { .. } => (
                &["protocol", "name", "version", "capabilities", "profile"],
                &[],
            ),
            Request::Setup { .. }
            | Request::Forget { .. }
            | Request::Sweep { .. }
            | Request::Reset { .. } => (&["ok"], &[]),
            Request::Reconfigure { inspect, .. } => match inspect {
                true => (&["ok", "before", "after"], &[]),
                false => (&["ok"], &[]),
            },
            Request::Acquire { inspect, .. } => match inspect {
                true => (
                    &["allowed", "retry_after_ns", "before", "after"],
                    &[
                        "remaining",
                        "reset_after_ns",
                        "created",
                        "replayed",
                        "retry",
                    ],
                ),
                false => (
                    &["allowed", "retry_after_ns"],
                    &[
                        "remaining",
                        "reset_after_ns",
                        "created",
                        "replayed",
                        "retry",
                    ],
                ),
            },
            Request::Settle { inspect, .. } => match inspect {
                true => (
                    &["allowed", "retry_after_ns", "before", "after"],
                    &["remaining", "reset_after_ns", "replayed"],
                ),
                false => (
                    &["allowed", "retry_after_ns"],
                    &["remaining", "reset_after_ns", "replayed"],
                ),
            },
            Request::Inspect { .. } => (&["state"], &[]),
            Request::WouldAllow { .. } => (&["allowed"], &[]),
        };
        let fields = self.fields();
        if let Some(missing) = required.iter().find(|name| !fields.contains(name)) {
            return Err(format!("the reply to {} has no {missing:?}", request.op()));
        }
        if let Some(foreign) = fields
            .iter()
            .find(|name| !required.contains(name) && !optional.contains(name))
        {
            return Err(format!(
                "the reply to {} has a field of another reply: {foreign:?}",
                request.op()
            ));
        }
        if self.ok == Some(false) {
            return Err(format!("the reply to {} says \"ok\": false", request.op()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_error(wait: &str) -> String {
        let line =
            format!(r#"{{"id":1,"allowed":false,"remaining":"0/1","retry_after_ns":{wait}}}"#);
        serde_json::from_str::<Reply>(&line)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_decision_reply_may_leave_remaining_out_but_not_retry_after() {
        let acquire = Request::Acquire {
            id: 1,
            key: 0,
            now_ns: 0,
            cost: 1,
            request_id: None,
            inspect: false,
            probe_retry: false,
            retry_slack_ns: 0,
        };
        let settle = Request::Settle {
            id: 1,
            key: 0,
            now_ns: 0,
            request_id: 7,
            actual: 1,
            inspect: false,
        };
        for line in [
            r#"{"id":1,"allowed":true,"retry_after_ns":null}"#,
            r#"{"id":1,"allowed":true,"remaining":null,"retry_after_ns":null}"#,
        ] {
            let reply: Reply = serde_json::from_str(line).unwrap();
            assert_eq!(reply.remaining, None, "{line}");
            assert_eq!(reply.check_shape(&acquire), Ok(()), "{line}");
            assert_eq!(reply.check_shape(&settle), Ok(()), "{line}");
        }
        let no_wait: Reply = serde_json::from_str(r#"{"id":1,"allowed":true}"#).unwrap();
        let refused = no_wait.check_shape(&acquire).unwrap_err();
        assert!(refused.contains("retry_after_ns"), "{refused}");
    }

    #[test]
    fn a_wait_that_is_no_u64_says_what_to_send() {
        let above = wait_error("18446744073709551616");
        assert!(
            above.contains("above 2^64 - 1 ns") && above.contains("send \"never\""),
            "{above}"
        );
        let negative = wait_error("-5");
        assert!(negative.contains("-5 ns is negative"), "{negative}");
        let fraction = wait_error("1.5");
        assert!(
            fraction.contains("1.5 ns is not a whole number"),
            "{fraction}"
        );
        let line =
            r#"{"id":1,"allowed":false,"remaining":"0/1","retry_after_ns":18446744073709551615}"#;
        let reply: Reply = serde_json::from_str(line).unwrap();
        assert_eq!(reply.retry_after_ns, Some(Some(WireWait::Ns(u64::MAX))));
        let never: Reply =
            serde_json::from_str(&line.replace("18446744073709551615", "\"never\"")).unwrap();
        assert_eq!(never.retry_after_ns, Some(Some(WireWait::never())));
    }
}
