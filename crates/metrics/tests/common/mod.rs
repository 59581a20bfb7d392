//! What a test reads back from a recorder: every series as `name{label=value,...}` (labels sorted)
//! with its value, and every name's help text.

use std::collections::BTreeMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// A value read back: a counter's whole number or a gauge's level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Counter(u64),
    Gauge(f64),
}

/// A recorder to publish into with `metrics::with_local_recorder`, and its reader.
pub fn recorder() -> (DebuggingRecorder, Snapshotter) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    (recorder, snapshotter)
}

/// Every series of the recorder now, and every description, by name.
pub fn read(snapshotter: &Snapshotter) -> (BTreeMap<String, Value>, BTreeMap<String, String>) {
    let mut series = BTreeMap::new();
    let mut help = BTreeMap::new();
    for (key, _unit, description, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let id = format!("{}{{{}}}", key.name(), labels.join(","));
        let value = match value {
            DebugValue::Counter(v) => Value::Counter(v),
            DebugValue::Gauge(v) => Value::Gauge(v.into_inner()),
            DebugValue::Histogram(_) => panic!("no histogram is published: {id}"),
        };
        series.insert(id, value);
        if let Some(description) = description {
            help.insert(key.name().to_string(), description.to_string());
        }
    }
    (series, help)
}
