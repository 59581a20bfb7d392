//! Replies of protocol version 1, one typed struct per kind of answer.
//!
//! Promises: every reply carries its request's `id`; a required field is always written (as
//! `null` where the protocol allows it); an optional field that is not known is left out, never
//! guessed; and a reply never carries fields of another kind (an `allowed` to a `sweep`).

use std::borrow::Cow;

use serde::Serialize;

use crate::values::{Ratio, State, Wait};

/// Any reply. Serialized as the struct it holds (the kinds differ by their fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// To `hello`.
    Hello(HelloReply),
    /// To `setup`, `forget`, `sweep`, `reset`, and `reconfigure` (with its probes).
    Done(DoneReply),
    /// To `acquire`.
    Acquire(AcquireReply),
    /// To `settle`.
    Settle(SettleReply),
    /// To `inspect`.
    Inspect(InspectReply),
    /// To `would_allow`.
    WouldAllow(WouldAllowReply),
    /// A refusal, to any request.
    Error(ErrorReply),
}

/// Who the subject is and what it answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HelloReply {
    /// Request id.
    pub id: u64,
    /// The version chosen from the harness's list.
    pub protocol: u64,
    /// Shown in reports.
    pub name: &'static str,
    /// Shown in reports.
    pub version: &'static str,
    /// Which requests the subject answers.
    pub capabilities: Capabilities,
    /// What the subject promises.
    pub profile: Profile,
}

/// The requests and probes a subject answers (docs/subject-protocol.md, "hello").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// `reconfigure` requests.
    pub reconfigure: bool,
    /// `forget` requests.
    pub forget: bool,
    /// `sweep` requests.
    pub sweep: bool,
    /// `inspect` requests, and `"inspect":true` on acquires and reconfigures.
    pub inspect: bool,
    /// `would_allow` requests, and `"probe_retry":true` on acquires.
    pub would_allow: bool,
    /// Acquires may carry `request_id`.
    pub request_ids: bool,
    /// The subject may drop buckets on its own.
    pub evicts: bool,
    /// How many requests may be outstanding, at least 1.
    pub batch: u32,
    /// The most bandwidths per key.
    pub bandwidths: u32,
    /// `settle` requests (optional in the protocol: false when left out).
    pub settle: bool,
}

/// What the subject promises: `exact` is checked decision by decision against the model; a
/// `safety` subject adds the profile's optional fields (`starts`, `time_resolution`, ...) here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Profile {
    /// `"exact"` or `"safety"`.
    pub name: &'static str,
}

/// `{"id":N,"ok":true}`, with the key's state around a reconfigure when it was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DoneReply {
    /// Request id.
    pub id: u64,
    /// Always true.
    pub ok: bool,
    /// Reconfigure with `"inspect":true` only: the state before (`null`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Option<State>>,
    /// Reconfigure with `"inspect":true` only: the state after (`null`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Option<State>>,
}

impl DoneReply {
    /// A plain `ok`.
    pub fn ok(id: u64) -> DoneReply {
        DoneReply {
            id,
            ok: true,
            before: None,
            after: None,
        }
    }
}

/// An acquire's decision and the probes asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AcquireReply {
    /// Request id.
    pub id: u64,
    /// Admitted and charged.
    pub allowed: bool,
    /// The balance after the decision.
    pub remaining: Ratio,
    /// Denial: the wait until the same request succeeds; `null` for an admission.
    pub retry_after_ns: Option<Wait>,
    /// The wait until the bucket is full again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_after_ns: Option<Wait>,
    /// This call created the key's bucket (left out if the subject cannot tell).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// The answer came from a request-id record.
    pub replayed: bool,
    /// `"inspect":true` only: the state just before (`null`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Option<State>>,
    /// `"inspect":true` only: the state just after (`null`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Option<State>>,
    /// `"probe_retry":true`, a denial with a finite wait, not a replay: the retry probes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryProbe>,
}

/// A settle's decision: shaped as an acquire's, without `created` and the retry probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SettleReply {
    /// Request id.
    pub id: u64,
    /// The charge was reconciled (a refund, or an extra that was covered and charged).
    pub allowed: bool,
    /// The balance after the settlement.
    pub remaining: Ratio,
    /// A denied extra: the wait until the same settle succeeds; `null` when allowed.
    pub retry_after_ns: Option<Wait>,
    /// The wait until the bucket is full again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_after_ns: Option<Wait>,
    /// The request was settled already with the same actual: the recorded settlement.
    pub replayed: bool,
    /// `"inspect":true` only: the state just before (`null`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Option<State>>,
    /// `"inspect":true` only: the state just after (`null`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Option<State>>,
}

/// `would_allow` of the same key and cost, asked of the state just after a denial with wait `w`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RetryProbe {
    /// At `now + w`: the retry succeeds.
    pub at: bool,
    /// At `now + w - 1`; `null` when `w = 0`.
    pub before: Option<bool>,
}

/// A key's stored state, `null` if it holds none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct InspectReply {
    /// Request id.
    pub id: u64,
    /// The state, not refilled.
    pub state: Option<State>,
}

/// Whether an acquire would be admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WouldAllowReply {
    /// Request id.
    pub id: u64,
    /// The answer.
    pub allowed: bool,
}

/// `{"id":N,"error":{"kind":...,"message":...}}`, with the key's state around the refused acquire
/// or reconfigure when it asked for `inspect` (an error changes nothing, and the harness checks it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ErrorReply {
    /// Request id.
    pub id: u64,
    /// What went wrong.
    pub error: Refusal,
    /// `"inspect":true` only: the state before (`null`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Option<State>>,
    /// `"inspect":true` only: the state after (`null`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Option<State>>,
}

/// A request the subject answers with an error instead of a result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The kind the harness judges.
    pub kind: ErrorKind,
    /// For people.
    pub message: Cow<'static, str>,
}

impl Refusal {
    /// A refusal of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal {
            kind,
            message: message.into(),
        }
    }
}

/// The error kinds of docs/subject-protocol.md, "Errors".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// `cost == 0` or `cost > capacity`: nothing changed.
    InvalidCost,
    /// A new key at the key bound: nothing changed.
    KeyLimit,
    /// A settle of a request id the key holds no live record of.
    UnknownRequest,
    /// A settle of a request whose acquire was denied.
    NotAdmitted,
    /// A settle of a request settled already with another actual.
    AlreadySettled,
    /// The subject cannot do this (the run is skipped).
    Unsupported,
    /// The subject's store failed.
    Store,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_nulls_are_written_and_unknowns_left_out() {
        let reply = Reply::Acquire(AcquireReply {
            id: 2,
            allowed: true,
            remaining: Ratio { numer: 9, denom: 1 },
            retry_after_ns: None,
            reset_after_ns: Some(Wait::After(5)),
            created: None,
            replayed: false,
            before: Some(None),
            after: None,
            retry: None,
        });
        assert_eq!(
            serde_json::to_string(&reply).unwrap(),
            r#"{"id":2,"allowed":true,"remaining":"9/1","retry_after_ns":null,"reset_after_ns":5,"replayed":false,"before":null}"#
        );
        let refusal = Reply::Error(ErrorReply {
            id: 3,
            error: Refusal::new(ErrorKind::KeyLimit, "full"),
            before: None,
            after: None,
        });
        assert_eq!(
            serde_json::to_string(&refusal).unwrap(),
            r#"{"id":3,"error":{"kind":"key_limit","message":"full"}}"#
        );
    }
}
