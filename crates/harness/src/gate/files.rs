//! Every file the gate writes: counterexamples, the scenario reports with their plots, and the
//! byte-for-byte comparison with committed reports.
//!
//! Promise: files land only under the reports directory (or the JUnit path); a report is compared as
//! bytes, so a stale one is found whatever changed in it.

use std::path::{Path, PathBuf};

use super::{GateError, GateOptions, ReportMode, plots};
use crate::counterexample::Counterexample;
use crate::report::ScenarioReport;

/// Writes `text` to `path`.
pub(super) fn write(path: &Path, text: &str) -> Result<(), GateError> {
    std::fs::write(path, text).map_err(|source| GateError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes one counterexample, creating its directory.
pub(super) fn counterexample(path: &Path, counterexample: &Counterexample) -> std::io::Result<()> {
    std::fs::create_dir_all(super::parent_dir(path))?;
    std::fs::write(path, counterexample.to_json())
}

/// Writes or compares the reports as `options.reports` says; returns the stale files.
pub(super) fn reports(
    options: &GateOptions,
    reports: &[ScenarioReport],
) -> Result<Vec<PathBuf>, GateError> {
    let mut stale = Vec::new();
    if options.reports == ReportMode::Skip {
        return Ok(stale);
    }
    let dir = &options.reports_dir;
    if options.reports == ReportMode::Write {
        std::fs::create_dir_all(dir).map_err(|source| GateError::Write {
            path: dir.clone(),
            source,
        })?;
    }
    for report in reports {
        for (name, bytes) in report_files(report)? {
            let path = dir.join(&name);
            match options.reports {
                ReportMode::Write => write(&path, &bytes)?,
                _ => {
                    if std::fs::read(&path).ok().as_deref() != Some(bytes.as_bytes()) {
                        stale.push(path);
                    }
                }
            }
        }
    }
    Ok(stale)
}

/// Every file of one scenario's report: name (relative to the reports directory) and content.
fn report_files(report: &ScenarioReport) -> Result<Vec<(String, String)>, GateError> {
    let plot_error = |message: String| GateError::Plot {
        scenario: report.scenario.clone(),
        message,
    };
    let mut files = Vec::new();
    let mut links = Vec::new();
    let balance_name = format!("{}-balance.svg", report.scenario);
    let arrival_name = format!("{}-arrival.svg", report.scenario);
    if report.samples.len() >= 2 {
        files.push((
            balance_name.clone(),
            plots::balance(&report.scenario, report.sample_key, &report.samples)
                .map_err(plot_error)?,
        ));
        files.push((
            arrival_name.clone(),
            plots::arrival(&report.scenario, report.sample_key, &report.samples)
                .map_err(plot_error)?,
        ));
        links.push(("balance: subject vs model", balance_name.as_str()));
        links.push((
            "admitted cost vs arrival-curve bound",
            arrival_name.as_str(),
        ));
    }
    let markdown = report.to_markdown(&links);
    files.push((format!("{}.md", report.scenario), markdown));
    files.push((format!("{}.json", report.scenario), report.to_json()));
    Ok(files)
}
