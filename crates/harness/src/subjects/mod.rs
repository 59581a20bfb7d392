//! The built-in subjects and the registry that builds any subject by name.
//!
//! Each adapter is small: it maps [`crate::Subject`] calls onto one implementation. Names are stable
//! because they appear in reports and replay commands.

#[cfg(any(test, feature = "test-fixtures"))]
pub mod broken;
pub mod core;
pub mod exec;
pub mod float;
#[cfg(feature = "governor")]
pub mod governor;
pub mod model;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub mod script;

pub use self::core::CoreSubject;
pub use self::float::{FloatGoSubject, FloatTextbookSubject};
#[cfg(feature = "governor")]
pub use self::governor::GovernorSubject;
pub use self::model::ModelSubject;

use bucketproof_trace::subject::{Subject, SubjectError, SubjectFactory};
use bucketproof_trace::trace::Setup;

/// Builds the subjects of this crate: `core`, `model`, `float-textbook`, `float-go`, `float-go-2019`
/// (Go before the golang/go#34861 fix), `governor` (feature `governor`), `redis` (feature `redis`,
/// needs a Redis at `REDIS_URL`) and `postgres` (feature `postgres`, needs `DATABASE_URL`).
pub struct BuiltinSubjects;

impl SubjectFactory for BuiltinSubjects {
    fn names(&self) -> Vec<String> {
        #[allow(unused_mut)] // pushed to only with the `governor` feature
        let mut names = vec![
            "core",
            "model",
            "float-textbook",
            "float-go",
            "float-go-2019",
        ];
        #[cfg(feature = "governor")]
        names.push("governor");
        #[cfg(feature = "redis")]
        names.push("redis");
        #[cfg(feature = "postgres")]
        names.push("postgres");
        names.into_iter().map(String::from).collect()
    }

    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
        fn boxed<S: Subject + 'static>(
            subject: Result<S, SubjectError>,
        ) -> Result<Box<dyn Subject>, SubjectError> {
            subject.map(|s| Box::new(s) as Box<dyn Subject>)
        }
        Some(match name {
            "core" => boxed(CoreSubject::new(setup)),
            "model" => boxed(ModelSubject::new(setup)),
            "float-textbook" => boxed(FloatTextbookSubject::new(setup)),
            "float-go" => boxed(FloatGoSubject::new(setup)),
            // Go's arithmetic before the golang/go#34861 fix, for the scenarios that reproduce it.
            "float-go-2019" => boxed(FloatGoSubject::with_go_version(
                setup,
                "float-go-2019",
                bucketproof_float::GoRateVersion::SecondsCapped,
            )),
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
            factories: vec![Box::new(BuiltinSubjects)],
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
