//! What a gate runs and where it writes, and the checks made on both before the first run.
//!
//! Promise: [`GateOptions::validate`] refuses every option the runs would trip over later (a zero
//! scale or seed count, scaled runs with reports, a reports path that is a file, a JUnit file that
//! cannot be created), naming the path, so nothing is run for a gate that cannot finish.

use std::path::{Path, PathBuf};

use super::GateError;
use crate::engine::EngineOptions;

/// What happens to the scenario reports (`<scenario>.{md,json}` and the SVG plots).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReportMode {
    /// Neither written nor compared.
    #[default]
    Skip,
    /// Written to the reports directory.
    Write,
    /// Compared byte for byte with the files in the reports directory; a difference fails the gate.
    Check,
}

/// The knobs of a gate. Start from [`GateOptions::new`] and set fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GateOptions {
    /// Subjects to run every scenario against; empty: each scenario's own list.
    pub subjects: Vec<String>,
    /// Seeds per scenario (the declared ones first, then the integers after them); `None`: the
    /// declared ones.
    pub seeds: Option<usize>,
    /// Multiplies every scenario's length; at least 1, and 1 whenever reports are written or checked.
    pub scale: u64,
    /// Where counterexamples (`failures/`) and reports go.
    pub reports_dir: PathBuf,
    /// What happens to the scenario reports.
    pub reports: ReportMode,
    /// A JUnit XML file to write: one test case per scenario, seed and subject.
    pub junit: Option<PathBuf>,
    /// A gate whose every run skipped passes instead of being [`super::Verdict::NothingChecked`].
    pub allow_skips: bool,
    /// Oracles and the shrink budget (its `failures_dir` is replaced by the reports directory's).
    pub engine: EngineOptions,
}

impl GateOptions {
    /// Each scenario's own subjects and seeds at scale 1, files under `reports_dir`, no reports, no
    /// JUnit, skips not allowed.
    pub fn new(reports_dir: impl Into<PathBuf>) -> GateOptions {
        GateOptions {
            subjects: Vec::new(),
            seeds: None,
            scale: 1,
            reports_dir: reports_dir.into(),
            reports: ReportMode::Skip,
            junit: None,
            allow_skips: false,
            engine: EngineOptions::default(),
        }
    }

    /// Where counterexamples are written (and what replay commands name).
    pub fn failures_dir(&self) -> PathBuf {
        self.reports_dir.join("failures")
    }

    /// Checks every option; see the module doc.
    pub fn validate(&self) -> Result<(), GateError> {
        if self.seeds == Some(0) {
            return Err(GateError::ZeroSeeds);
        }
        if self.scale == 0 {
            return Err(GateError::ZeroScale);
        }
        if self.scale != 1 && self.reports != ReportMode::Skip {
            return Err(GateError::ScaledReports { scale: self.scale });
        }
        if self.reports_dir.exists() && !self.reports_dir.is_dir() {
            return Err(GateError::ReportsNotADirectory {
                path: self.reports_dir.clone(),
            });
        }
        if let Some(path) = &self.junit {
            writable(path)?;
        }
        Ok(())
    }
}

/// Opens `path` for writing without truncating it: proves the file can be created (its directory
/// exists, it is not a directory, permissions allow it) before hours of runs depend on it.
pub fn writable(path: &Path) -> Result<(), GateError> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map(drop)
        .map_err(|source| GateError::Write {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "bucketproof-gate-options-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn out_of_range_numbers_are_refused() {
        let mut options = GateOptions::new("reports");
        options.scale = 0;
        assert!(matches!(options.validate(), Err(GateError::ZeroScale)));
        options.scale = 2;
        options.reports = ReportMode::Check;
        assert!(matches!(
            options.validate(),
            Err(GateError::ScaledReports { scale: 2 })
        ));
        let mut options = GateOptions::new("reports");
        options.seeds = Some(0);
        assert!(matches!(options.validate(), Err(GateError::ZeroSeeds)));
    }

    #[test]
    fn output_paths_are_checked_and_named() {
        let dir = scratch("paths");
        let file = dir.join("a-file");
        std::fs::write(&file, "x").unwrap();
        let error = GateOptions::new(&file).validate().unwrap_err();
        assert!(error.to_string().contains(&file.display().to_string()));

        let mut options = GateOptions::new(&dir);
        let junit = dir.join("missing").join("junit.xml");
        options.junit = Some(junit.clone());
        let error = options.validate().unwrap_err();
        assert!(error.to_string().contains(&junit.display().to_string()));

        options.junit = Some(dir.join("junit.xml"));
        options.validate().unwrap();
    }
}
