//! A command that cannot go on: a usage, scenario or file problem, reported on stderr with exit 2.
//! A failing check is not one of these; it is an exit code of its own.

/// The exit code of a usage or input error.
pub const USAGE: u8 = 2;

/// An error to report before exiting with [`USAGE`].
pub struct Fatal(pub String);

impl<E: std::fmt::Display> From<E> for Fatal {
    fn from(error: E) -> Fatal {
        Fatal(error.to_string())
    }
}
