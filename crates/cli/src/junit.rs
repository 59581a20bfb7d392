//! JUnit XML for CI dashboards: one `<testsuite>` per scenario, one `<testcase>` per seed and subject.
//! No timings (the `time` attributes are omitted), so the file is reproducible.

use bucketproof_harness::engine::Status;
use bucketproof_harness::report::ScenarioReport;

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

/// The whole document.
pub fn render(reports: &[ScenarioReport]) -> String {
    let count = |f: &dyn Fn(&Status) -> bool| {
        reports
            .iter()
            .flat_map(|r| &r.runs)
            .filter(|run| f(&run.status))
            .count()
    };
    let tests = count(&|_| true);
    let failures = count(&|s| s.is_failure());
    let errors = count(&|s| matches!(s, Status::Error { .. }));
    let skipped = count(&|s| matches!(s, Status::Skipped { .. }));
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"bucketproof\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\">\n"
    ));
    for report in reports {
        let suite_failures = report.runs.iter().filter(|r| r.status.is_failure()).count();
        out.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{suite_failures}\">\n",
            escape(&report.scenario),
            report.runs.len()
        ));
        for run in &report.runs {
            let name = format!("{} seed {} [{}]", report.scenario, run.seed, run.subject);
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
