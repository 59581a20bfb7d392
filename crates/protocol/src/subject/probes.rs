//! The exec subject's probes (`inspect`, `would_allow`): answered from the replies of the ops
//! written ahead when they saw the state exactly where the runner stands, else by one round trip;
//! a probe nothing can answer is "cannot tell", never a guess.

use bucketproof_trace::subject::{Inspection, SubjectError};
use bucketproof_trace::trace::{Acquire, Op};

use super::{Answered, ExecSubject};
use crate::reply::Reply;
use crate::wire::{Request, WireWait};

impl ExecSubject {
    /// `key`'s state where the runner stands, from the replies if they show it.
    pub(super) fn inspect_from_replies(
        &mut self,
        key: u64,
    ) -> Result<Option<Inspection>, SubjectError> {
        // Just after the last answered op: its `after`.
        if let Some(answered) = &self.answered
            && Self::key_of(&answered.op) == Some(key)
            && let Some(after) = answered.reply.after.clone()
        {
            return self.state(after.as_ref()).map(Some);
        }
        // Just before the next op: its `before`.
        self.fill()?;
        if let Some(front) = self.sent.front()
            && Self::key_of(&front.op) == Some(key)
            && matches!(
                front.op,
                Op::Acquire(_) | Op::Settle(_) | Op::Reconfigure { .. }
            )
        {
            self.read_front()?;
            let before = self
                .sent
                .front()
                .and_then(|s| s.reply.as_ref()?.before.clone());
            if let Some(before) = before {
                return self.state(before.as_ref()).map(Some);
            }
        }
        Ok(None)
    }

    pub(super) fn round_trip(&mut self, request: Request) -> Result<Reply, SubjectError> {
        let process = self.process()?;
        let result = process
            .write(std::slice::from_ref(&request))
            .and_then(|()| process.read(&request));
        let reply = result.map_err(|b| self.fail(b))?;
        if let Some(error) = reply.error {
            let what = format!(
                "refused {} ({}: {})",
                request.op(),
                error.kind,
                error.message
            );
            return Err(self.malformed(what));
        }
        Ok(reply)
    }

    pub(super) fn try_inspect(&mut self, key: u64) -> Result<Inspection, SubjectError> {
        if !self.capabilities().inspect {
            return Ok(Inspection::Unsupported);
        }
        if let Some(shown) = self.inspect_from_replies(key)? {
            return Ok(shown);
        }
        if !self.sent.is_empty() {
            return Ok(Inspection::Unsupported);
        }
        let id = self.process()?.next_id();
        let reply = self.round_trip(Request::Inspect { id, key })?;
        self.state(reply.state.flatten().as_ref())
    }

    pub(super) fn try_would_allow(
        &mut self,
        acquire: Acquire,
    ) -> Result<Option<bool>, SubjectError> {
        if !self.capabilities().would_allow {
            return Ok(None);
        }
        if let Some(Answered {
            op: Op::Acquire(denied),
            reply,
        }) = &self.answered
            && denied.key == acquire.key
            && denied.cost == acquire.cost
            && let (Some(probe), Some(Some(WireWait::Ns(wait)))) =
                (reply.retry, &reply.retry_after_ns)
        {
            let retry_at = denied.now.saturating_add(*wait);
            if acquire.now == retry_at.saturating_add(self.retry_slack_ns) {
                return Ok(Some(probe.at));
            }
            if *wait > 0 && acquire.now == retry_at - 1 && self.retry_slack_ns == 0 {
                return Ok(probe.before);
            }
        }
        if !self.sent.is_empty() {
            // The child is already past this point: only the probes above could tell.
            return Ok(None);
        }
        let id = self.process()?.next_id();
        let reply = self.round_trip(Request::WouldAllow {
            id,
            key: acquire.key,
            now_ns: acquire.now,
            cost: acquire.cost,
        })?;
        Ok(reply.allowed)
    }
}
