//! The registry that builds any subject by name: factories searched in order, by default the
//! check crate's in-process subjects, then the external ones this build has features for.

use bucketproof_check::subjects::BuiltinSubjects;
use bucketproof_subjects::ExternalSubjects;
use bucketproof_trace::subject::{Subject, SubjectError, SubjectFactory};
use bucketproof_trace::trace::Setup;

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

/// A registry is one more factory (for `serve`, which puts any one subject behind the protocol).
impl SubjectFactory for Registry {
    fn names(&self) -> Vec<String> {
        Registry::names(self)
    }

    fn knows(&self, name: &str) -> bool {
        Registry::knows(self, name)
    }

    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
        self.knows(name).then(|| Registry::build(self, name, setup))
    }

    fn preflight(&self, name: &str) -> Option<Result<(), String>> {
        self.knows(name).then(|| Registry::preflight(self, name))
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
