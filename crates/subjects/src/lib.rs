//! # bucketproof-subjects: the subjects that need something outside this workspace
//!
//! Each behind its feature, so a crate that names none builds none of them: `governor` (the
//! governor crate's keyed limiter), `redis` (our Lua script on a Redis at `REDIS_URL`, and
//! `redis-script:<file>`, a user's own Lua limiter: [`script`]), `postgres` (our PL/pgSQL
//! function at `DATABASE_URL`). Each adapter maps [`bucketproof_trace::Subject`] calls onto one
//! implementation; a config it cannot hold is refused as unsupported or inexpressible, so the run
//! is skipped visibly, never judged. Names are stable because they appear in reports and replay
//! commands.
//!
//! Each adapter is small: it maps [`bucketproof_trace::Subject`] calls onto one implementation. Names are stable
//! because they appear in reports and replay commands.

#[cfg(feature = "governor")]
pub mod governor;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub mod script;

#[cfg(feature = "governor")]
pub use self::governor::GovernorSubject;

use bucketproof_trace::subject::{Subject, SubjectError, SubjectFactory};
use bucketproof_trace::trace::Setup;

/// Builds the subjects that need something outside this workspace: `governor` (feature `governor`),
/// `redis` (feature `redis`, needs a Redis at `REDIS_URL`) and `postgres` (feature `postgres`,
/// needs `DATABASE_URL`).
pub struct ExternalSubjects;

impl SubjectFactory for ExternalSubjects {
    fn names(&self) -> Vec<String> {
        let names: &[&str] = &[
            #[cfg(feature = "governor")]
            "governor",
            #[cfg(feature = "redis")]
            "redis",
            #[cfg(feature = "postgres")]
            "postgres",
        ];
        names.iter().map(|name| String::from(*name)).collect()
    }

    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
        #[allow(dead_code)] // called only with the subjects' features
        fn boxed<S: Subject + 'static>(
            subject: Result<S, SubjectError>,
        ) -> Result<Box<dyn Subject>, SubjectError> {
            subject.map(|s| Box::new(s) as Box<dyn Subject>)
        }
        let _ = setup; // read only with the subjects' features
        match name {
            #[cfg(feature = "governor")]
            "governor" => Some(boxed(GovernorSubject::new(setup))),
            #[cfg(feature = "redis")]
            "redis" => Some(boxed(redis::RedisSubject::new(setup))),
            #[cfg(feature = "postgres")]
            "postgres" => Some(boxed(postgres::PostgresSubject::new(setup))),
            _ => None,
        }
    }
}
