//! One file per subcommand. Each turns its arguments into harness calls, writes its results through
//! [`crate::out::Out`] and returns its exit code; none of them decides a verdict the harness decides.

pub mod check;
pub mod compare;
pub mod list;
pub mod mutants;
pub mod peers;
pub mod replay;
pub mod run;
pub mod serve;
