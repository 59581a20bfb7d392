//! Whether terminal output is coloured.
//!
//! Promise: a non-empty `NO_COLOR` turns colour off (no-color.org: an empty value disables nothing);
//! otherwise `CLICOLOR_FORCE` set to anything but empty or `0` turns it on even when the stream is
//! not a terminal; otherwise colour follows whether the stream is a terminal.

use std::ffi::OsStr;

/// Colour for a stream, from the environment.
pub fn enabled(is_terminal: bool) -> bool {
    decide(
        is_terminal,
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("CLICOLOR_FORCE").as_deref(),
    )
}

fn decide(is_terminal: bool, no_color: Option<&OsStr>, clicolor_force: Option<&OsStr>) -> bool {
    if no_color.is_some_and(|value| !value.is_empty()) {
        return false;
    }
    if clicolor_force.is_some_and(|value| !value.is_empty() && value != "0") {
        return true;
    }
    is_terminal
}

#[cfg(test)]
mod tests {
    use super::decide;
    use std::ffi::OsStr;

    #[test]
    fn no_color_needs_a_value_and_wins_over_clicolor_force() {
        let some = |s: &'static str| Some(OsStr::new(s));
        assert!(decide(true, None, None));
        assert!(!decide(false, None, None));
        assert!(
            decide(true, some(""), None),
            "an empty NO_COLOR disables nothing"
        );
        assert!(!decide(true, some("1"), None));
        assert!(decide(false, None, some("1")));
        assert!(!decide(false, None, some("0")));
        assert!(!decide(false, None, some("")));
        assert!(decide(false, some(""), some("1")));
        assert!(!decide(false, some("1"), some("1")));
    }
}
