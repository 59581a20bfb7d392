//! Time injection for `time = "server"`: the only rewrite of a user's script is this prelude,
//! prepended to its text. The harness sends the op's now as two extra trailing ARGV entries
//! (seconds, microseconds); the prelude removes them from ARGV and shadows `redis` with a table
//! whose `call` and `pcall` answer `TIME` with them (as strings, as Redis does) and pass every other
//! command to the real `redis`. Everything else of `redis` (`replicate_commands`, `sha1hex`, ...)
//! is reached through `__index`.
//!
//! Limits: now reaches the script at microsecond resolution (so the profile's time resolution is
//! `us` or coarser); a script that reads time another way is not covered, and TTLs (`EXPIRE`,
//! `SET ... EX`) still run on Redis's own clock.

/// Prepended to the script text under `time = "server"`.
pub const PRELUDE: &str = "local __bp_us = table.remove(ARGV); local __bp_s = table.remove(ARGV)
local __bp_redis = redis
local redis = setmetatable({
  call = function(cmd, ...) if string.upper(cmd) == 'TIME' then return { __bp_s, __bp_us } end return __bp_redis.call(cmd, ...) end,
  pcall = function(cmd, ...) if string.upper(cmd) == 'TIME' then return { __bp_s, __bp_us } end return __bp_redis.pcall(cmd, ...) end,
}, { __index = __bp_redis })
";

/// The text loaded into Redis: `body` with the prelude if `inject` (a `#!` first line, Redis 7's
/// script flags, stays first).
pub fn script_text(body: &str, inject: bool) -> String {
    if !inject {
        return body.to_owned();
    }
    match body.strip_prefix("#!") {
        Some(rest) => {
            let (flags, rest) = rest.split_once('\n').unwrap_or((rest, ""));
            format!("#!{flags}\n{PRELUDE}{rest}")
        }
        None => format!("{PRELUDE}{body}"),
    }
}

/// The two trailing ARGV entries for `now` (harness ns) with `epoch_s` added: whole seconds and
/// the microseconds within the second (truncated).
pub fn time_args(now: u64, epoch_s: u64) -> (u128, u128) {
    let seconds = u128::from(epoch_s) + u128::from(now / 1_000_000_000);
    let micros = u128::from(now % 1_000_000_000 / 1_000);
    (seconds, micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prelude_goes_first_after_script_flags() {
        assert_eq!(script_text("return 1", false), "return 1");
        assert!(script_text("return 1", true).starts_with(PRELUDE));
        let flagged = script_text("#!lua flags=no-writes\nreturn 1", true);
        assert!(flagged.starts_with("#!lua flags=no-writes\nlocal __bp_us"));
        assert!(flagged.ends_with("return 1"));
        assert_eq!(time_args(1_234_567_891_234, 10), (1_244, 567_891));
    }
}
