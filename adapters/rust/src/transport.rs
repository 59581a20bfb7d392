//! Newline-delimited JSON over a byte stream, batched: the harness may write up to `batch`
//! requests before it reads a reply, so replies are buffered and written once per batch.
//!
//! Promises: one reply per request, in request order; replies are flushed exactly when no more
//! request bytes are waiting in the input buffer (so a batch costs one write, and a lone request
//! is never left unanswered while the harness waits); the replies to every request before a
//! malformed one are flushed before the error is returned.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};

use crate::error::{ProtocolError, ServeError};
use crate::parse;
use crate::session::Session;
use crate::subject::Subject;

/// Input buffer. At least the 8 KiB of std's own stdin buffer, so every read bypasses that one
/// (std's `BufReader` reads straight into the caller's buffer when its own is empty and the
/// caller's is no smaller): what `BufReader::buffer` shows is then all the input there is.
const READ_BUFFER: usize = 256 * 1024;

/// Output buffer: room for the replies of a whole batch of 1024 in the common case.
const WRITE_BUFFER: usize = 512 * 1024;

/// Serves `S` over `input`/`output` until `input` ends (Ok) or the conversation breaks.
pub fn serve<S: Subject>(input: impl Read, output: impl Write) -> Result<(), ServeError> {
    let mut reader = BufReader::with_capacity(READ_BUFFER, input);
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER, output);
    let result = answer_all::<S>(&mut reader, &mut writer);
    // Also after a protocol error: the harness should see every reply that was due.
    let flushed = writer.flush();
    result?;
    Ok(flushed?)
}

fn answer_all<S: Subject>(
    reader: &mut BufReader<impl Read>,
    writer: &mut impl Write,
) -> Result<(), ServeError> {
    let mut session = Session::<S>::default();
    let mut line = Vec::with_capacity(1024);
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(()); // the harness closed stdin: done
        }
        let id = session.next_id();
        if line.last() != Some(&b'\n') {
            return Err(ProtocolError::Unterminated { id }.into());
        }
        let request =
            parse::request(&line).map_err(|source| ProtocolError::Malformed { id, source })?;
        let reply = session.answer(request)?;
        serde_json::to_writer(&mut *writer, &reply).map_err(std::io::Error::from)?;
        writer.write_all(b"\n")?;
        // `buffer()`, not `fill_buf()`: the latter would block reading the next batch before this
        // one's replies are out, and the harness waits for them before it writes again.
        if reader.buffer().is_empty() {
            writer.flush()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Core;

    fn run(input: &str) -> (Result<(), ServeError>, String) {
        let mut output = Vec::new();
        let result = serve::<Core>(input.as_bytes(), &mut output);
        (result, String::from_utf8(output).unwrap())
    }

    const HELLO: &str = "{\"id\":0,\"op\":\"hello\",\"protocol\":[1]}\n";
    const SETUP: &str = "{\"id\":1,\"op\":\"setup\",\"config\":[{\"capacity\":10,\"rate_per_s\":\"5/1\",\"rate\":\"5/s\"}],\"max_keys\":100,\"policy\":\"evict_full\",\"sweep_per_op\":4,\"dedupe_window_ns\":60000000000,\"dedupe_per_key\":4}\n";

    #[test]
    fn a_trace_is_answered_exactly() {
        let input = [
            HELLO,
            SETUP,
            "{\"id\":2,\"op\":\"acquire\",\"key\":3,\"now_ns\":1000,\"cost\":10,\"inspect\":true}\n",
            "{\"id\":3,\"op\":\"acquire\",\"key\":3,\"now_ns\":1000,\"cost\":2,\"probe_retry\":true,\"request_id\":9}\n",
            "{\"id\":4,\"op\":\"acquire\",\"key\":3,\"now_ns\":9,\"cost\":2,\"request_id\":9}\n",
            "{\"id\":5,\"op\":\"acquire\",\"key\":3,\"now_ns\":1000,\"cost\":11}\n",
            "{\"id\":6,\"op\":\"reset\"}\n",
        ]
        .concat();
        let (result, output) = run(&input);
        result.unwrap();
        let lines: Vec<&str> = output.lines().collect();
        assert!(
            lines[0].starts_with("{\"id\":0,\"protocol\":1,"),
            "{}",
            lines[0]
        );
        assert_eq!(lines[1], "{\"id\":1,\"ok\":true}");
        assert_eq!(
            lines[2],
            "{\"id\":2,\"allowed\":true,\"remaining\":\"0/1000000000\",\"retry_after_ns\":null,\
             \"reset_after_ns\":2000000000,\"created\":true,\"replayed\":false,\"before\":null,\
             \"after\":{\"tokens\":\"0/1000000000\",\"last_refill_ns\":1000,\"capacity\":10}}"
        );
        // 2 tokens at 5/s: 400 ms, and 1 ns earlier is too early.
        assert_eq!(
            lines[3],
            "{\"id\":3,\"allowed\":false,\"remaining\":\"0/1000000000\",\"retry_after_ns\":400000000,\
             \"reset_after_ns\":2000000000,\"created\":false,\"replayed\":false,\
             \"retry\":{\"at\":true,\"before\":false}}"
        );
        // The same request id, with the clock run back: the recorded denial, judged at the cursor.
        assert_eq!(
            lines[4],
            "{\"id\":4,\"allowed\":false,\"remaining\":\"0/1000000000\",\"retry_after_ns\":400000000,\
             \"reset_after_ns\":2000000000,\"created\":false,\"replayed\":true}"
        );
        assert!(
            lines[5].starts_with("{\"id\":5,\"error\":{\"kind\":\"invalid_cost\""),
            "{}",
            lines[5]
        );
        assert_eq!(lines[6], "{\"id\":6,\"ok\":true}");
    }

    #[test]
    fn a_broken_conversation_stops_after_answering_what_came_before() {
        for (tail, wanted) in [
            (
                "{\"id\":2,\"op\":\"sweep\",\"now_ns\":1,\"key\":1}\n",
                "not a valid request",
            ),
            ("{\"id\":3,\"op\":\"sweep\",\"now_ns\":1}\n", "expected 2"),
            (
                "{\"id\":2,\"op\":\"hello\",\"protocol\":[1]}\n",
                "a second time",
            ),
            (
                "{\"id\":2,\"op\":\"sweep\",\"now_ns\":1}",
                "without the line's newline",
            ),
            ("not json\n", "not a valid request"),
        ] {
            let (result, output) = run(&[HELLO, SETUP, tail].concat());
            let error = result.unwrap_err();
            assert_eq!(error.exit_code(), 2);
            assert!(error.to_string().contains(wanted), "{error}");
            assert_eq!(output.lines().count(), 2, "{output}");
        }
        let (result, _) = run("{\"id\":0,\"op\":\"sweep\",\"now_ns\":1}\n");
        assert!(result.unwrap_err().to_string().contains("before hello"));
        let (result, _) = run(&[HELLO, "{\"id\":1,\"op\":\"forget\",\"key\":1}\n"].concat());
        assert!(result.unwrap_err().to_string().contains("outside a setup"));
    }

    #[test]
    fn configs_the_limiter_cannot_hold_are_unsupported() {
        let setup = SETUP.replace("\"5/1\"", "\"1/8589934592\"");
        let (result, output) = run(&[HELLO, &setup].concat());
        result.unwrap();
        assert!(
            output.contains("{\"id\":1,\"error\":{\"kind\":\"unsupported\""),
            "{output}"
        );
        let (result, output) = run("{\"id\":0,\"op\":\"hello\",\"protocol\":[2]}\n");
        result.unwrap();
        assert!(output.contains("\"kind\":\"unsupported\""), "{output}");
    }

    /// No input makes the adapter panic: every byte of a valid conversation, replaced by bytes
    /// that matter to JSON, still ends in a reply stream or an error.
    #[test]
    fn no_mutated_conversation_panics() {
        let valid = [
            HELLO,
            SETUP,
            "{\"id\":2,\"op\":\"acquire\",\"key\":3,\"now_ns\":18446744073709551615,\"cost\":10,\"request_id\":1,\"inspect\":true,\"probe_retry\":true}\n",
            "{\"id\":3,\"op\":\"reconfigure\",\"key\":3,\"now_ns\":0,\"config\":[{\"capacity\":1,\"rate_per_s\":\"0/1\",\"rate\":\"0/s\"}],\"inspect\":true}\n",
            "{\"id\":4,\"op\":\"acquire\",\"key\":3,\"now_ns\":0,\"cost\":1,\"probe_retry\":true}\n",
            "{\"id\":5,\"op\":\"would_allow\",\"key\":3,\"now_ns\":1,\"cost\":0}\n",
            "{\"id\":6,\"op\":\"sweep\",\"now_ns\":1}\n",
        ]
        .concat()
        .into_bytes();
        run(std::str::from_utf8(&valid).unwrap()).0.unwrap();
        for at in 0..valid.len() {
            for byte in *b"0 9\"\\{}[],:-.e\n\xff" {
                let mut input = valid.clone();
                input[at] = byte;
                let _ = serve::<Core>(&input[..], &mut Vec::new());
            }
        }
    }
}
