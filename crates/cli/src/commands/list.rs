//! `bucketproof list`: the scenarios (ops, seeds, reach targets) and the subjects of this binary,
//! each subject file with what it still needs built or installed.

use std::path::PathBuf;

use bucketproof_harness::gate;

use crate::fatal::Fatal;
use crate::out::Out;
use crate::project;

/// Lists scenarios under `paths` (default: the project's) and every registered subject.
pub fn list(paths: &[PathBuf], out: &mut Out) -> Result<u8, Fatal> {
    let scenarios = gate::load_scenarios(&project::scenario_paths(paths))?;
    out.line("scenarios:")?;
    for scenario in &scenarios {
        let reach: Vec<&str> = scenario.reach.iter().map(|e| e.0.as_str()).collect();
        out.line(format!(
            "  {:<28} {:>7} ops x {} seed(s)  reach: {}",
            scenario.name,
            scenario.total_ops(),
            scenario.seeds.len(),
            reach.join(", ")
        ))?;
    }
    out.line("subjects:")?;
    let exec = project::exec_subjects()?;
    let scripts = project::script_subjects()?;
    for name in project::registry()?.names() {
        match exec
            .files()
            .get(&name)
            .or_else(|| scripts.files().get(&name))
        {
            Some(path) => {
                // Checked without starting anything: what a subject file says it needs.
                let unready = exec.spec(&name).and_then(|spec| match spec {
                    Ok(spec) => spec.unready(),
                    Err(e) => Some(e.to_string()),
                });
                let status =
                    unready.map_or_else(String::new, |why| format!("  (not ready: {why})"));
                out.line(format!("  {name:<28} {}{status}", path.display()))?
            }
            None => out.line(format!("  {name}"))?,
        }
    }
    out.line("  exec:<command line>           any program speaking docs/subject-protocol.md")?;
    out.line("  <path>.toml                   a subject file anywhere (docs/subject-protocol.md)")?;
    out.line("  redis-script:<file.toml>      a Lua script on Redis, described as in docs/redis-script.md")?;
    Ok(0)
}
