//! The subjects that need nothing outside this workspace, and their factory. Each adapter is small:
//! it maps [`bucketproof_trace::Subject`] calls onto one implementation. Names are stable because
//! they appear in reports and replay commands.

#[cfg(any(test, feature = "test-fixtures"))]
pub mod broken;
pub mod core;
pub mod float;
pub mod model;

pub use self::core::CoreSubject;
pub use self::float::{FloatGoSubject, FloatTextbookSubject};
pub use self::model::ModelSubject;

use bucketproof_trace::subject::{Subject, SubjectError, SubjectFactory};
use bucketproof_trace::trace::Setup;

/// Builds the subjects of this crate: `core`, `model`, `float-textbook`, `float-go` and
/// `float-go-2019` (Go before the golang/go#34861 fix).
pub struct BuiltinSubjects;

impl SubjectFactory for BuiltinSubjects {
    fn names(&self) -> Vec<String> {
        let names = [
            "core",
            "model",
            "float-textbook",
            "float-go",
            "float-go-2019",
        ];
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
            _ => return None,
        })
    }
}
