//! Children kept between traces: starting a Python interpreter costs tens of milliseconds, and a
//! gate (with its shrinking) runs thousands of traces, so a healthy child is reset and reused.
//!
//! Promise: a process is handed out to one subject at a time; only a child that answered its reset
//! comes back; a broken one is dropped (killed), and the next trace starts a fresh one.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::process::Process;

/// Idle children by subject name.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<BTreeMap<String, Vec<Process>>>,
}

impl Pool {
    /// An idle child of `name`, if one is waiting.
    pub fn take(&self, name: &str) -> Option<Process> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.get_mut(name)?.pop()
    }

    /// Returns a child that answered its reset.
    pub fn give_back(&self, name: &str, process: Process) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.entry(name.to_owned()).or_default().push(process);
    }
}
