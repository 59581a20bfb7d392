//! The subjects that need something outside this workspace, and the registry that builds any
//! subject by name (the check crate's in-process subjects first).
//!
//! Each adapter is small: it maps [`crate::Subject`] calls onto one implementation. Names are stable
//! because they appear in reports and replay commands.

pub mod exec;
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

use bucketproof_check::subjects::BuiltinSubjects;
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
        Some(match name {
            #[cfg(feature = "governor")]
            "governor" => boxed(GovernorSubject::new(setup)),
            #[cfg(feature = "redis")]
            "redis" => boxed(redis::RedisSubject::new(setup)),
            #[cfg(feature = "postgres")]
            "postgres" => boxed(postgres::PostgresSubject::new(setup)),
            _ => return None,
        })
    }
}

/// A registry of factories, searched in order.
pub struct Registry {
    factories: Vec<Box<dyn SubjectFactory>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            factories: vec![Box::new(BuiltinSubjects), Box::new(ExternalSubjects)],
        }
    }
}

impl Registry {
    /// Adds a factory (e.g. the mutants or Redis).
    pub fn with(mut self, factory: impl SubjectFactory + 'static) -> Registry {
        self.factories.push(Box::new(factory));
        self
    }

    /// Every buildable name.
    pub fn names(&self) -> Vec<String> {
        self.factories.iter().flat_map(|f| f.names()).collect()
    }

    /// True if some factory builds `name`.
    pub fn knows(&self, name: &str) -> bool {
        self.factories.iter().any(|factory| factory.knows(name))
    }

    /// Checks once that `name` can run at all ([`SubjectFactory::preflight`]).
    pub fn preflight(&self, name: &str) -> Result<(), String> {
        (self.factories.iter())
            .find_map(|factory| factory.preflight(name))
            .unwrap_or_else(|| Err(format!("unknown subject {name:?}")))
    }

    /// Builds `name` for `setup`.
    pub fn build(&self, name: &str, setup: &Setup) -> Result<Box<dyn Subject>, SubjectError> {
        self.factories
            .iter()
            .find_map(|factory| factory.build(name, setup))
            .unwrap_or_else(|| {
                Err(SubjectError::Build(format!(
                    "unknown subject {name:?}; known: {}",
                    self.names().join(", ")
                )))
            })
    }
}
