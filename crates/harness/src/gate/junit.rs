//! JUnit XML for CI dashboards: one `<testsuite>` per scenario, one `<testcase>` per seed and subject.
//! No timings (the `time` attributes are omitted), so the file is reproducible.
//!
//! Promise: the totals are the gate's [`Counts`], the same numbers the text and JSON summaries show.

use super::Counts;
use crate::engine::Status;
use crate::report::ScenarioReport;

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The whole document; `counts` are the totals of `reports`' runs.
pub(super) fn render(reports: &[ScenarioReport], counts: &Counts) -> String {
    let Counts {
        runs: tests,
        failed: failures,
        errors,
        skipped,
        ..
    } = *counts;
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"bucketproof\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\">\n"
    ));
    for report in reports {
        let suite_failures = Counts::of_statuses(report.runs.iter().map(|r| &r.status)).failed;
        out.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{suite_failures}\">\n",
            escape(&report.scenario),
            report.runs.len()
        ));
        for run in &report.runs {
            let name = format!(
                "{} seed {} [{}, profile {}]",
                report.scenario, run.seed, run.subject, run.profile
            );
            out.push_str(&format!(
                "    <testcase classname=\"bucketproof.{}\" name=\"{}\"",
                escape(&report.scenario),
                escape(&name)
            ));
            let mut detail = run.status.detail();
            if let Some(replay) = &run.replay {
                detail.push_str(&format!("\nreplay: {replay}"));
            }
            match &run.status {
                Status::Pass => out.push_str("/>\n"),
                Status::Skipped { .. } => out.push_str(&format!(
                    ">\n      <skipped message=\"{}\"/>\n    </testcase>\n",
                    escape(&detail)
                )),
                Status::Error { .. } => out.push_str(&format!(
                    ">\n      <error message=\"{}\"/>\n    </testcase>\n",
                    escape(&detail)
                )),
                Status::Fail { .. } | Status::Unreached { .. } => out.push_str(&format!(
                    ">\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>\n",
                    run.status.word(),
                    escape(&detail),
                    escape(&detail)
                )),
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}
