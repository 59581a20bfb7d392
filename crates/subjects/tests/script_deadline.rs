//! A Redis that stops answering is a harness error within the script subject's deadline, never a
//! hang: a fake server on loopback answers the connection's setup and `SCRIPT LOAD`, then reads the
//! first pipeline of `EVALSHA` calls and never replies; the subject is then dropped without waiting on
//! the hung connection again. Its own test binary because it points
//! `REDIS_URL` (read by every script subject of the process) at the fake.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bucketproof_subjects::script::{DEADLINE, ScriptSubjects};
use bucketproof_trace::{Acquire, ConfigSpec, Op, Setup, Subject, SubjectError};

/// One RESP command (an array of bulk strings), or `None` at the end of the stream.
fn command(reader: &mut impl BufRead) -> Option<Vec<String>> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let count: usize = line.trim().strip_prefix('*')?.parse().ok()?;
    let mut words = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut word = vec![0; len + 2];
        reader.read_exact(&mut word).ok()?;
        word.truncate(len);
        words.push(String::from_utf8_lossy(&word).into_owned());
    }
    Some(words)
}

#[test]
fn a_redis_that_stops_answering_is_an_error_within_the_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        while let Some(words) = command(&mut reader) {
            let first = words.first().map(|w| w.to_uppercase()).unwrap_or_default();
            let reply = match first.as_str() {
                "SCRIPT" => format!("$40\r\n{}\r\n", "0".repeat(40)),
                // Read, never answered: the hang.
                "EVALSHA" => continue,
                _ => "+OK\r\n".to_owned(),
            };
            if writer.write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
    });
    // SAFETY of the test: this binary has this one test, so no other thread reads REDIS_URL.
    unsafe { std::env::set_var("REDIS_URL", &url) };
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let factory = ScriptSubjects::new(&workspace);
    let loaded = factory
        .load(&workspace.join("tests/fixtures/redis-script/bucket.toml"))
        .unwrap();
    let setup = Setup::new(ConfigSpec::new(3, "1/s"));
    let mut subject = ScriptSubjects::build_loaded("bucket", loaded, &setup).unwrap();
    let ops: Vec<Acquire> = (0..10)
        .map(|i| Acquire {
            key: 0,
            cost: 1,
            now: i,
            request_id: None,
        })
        .collect();
    subject.upcoming(&ops.iter().copied().map(Op::Acquire).collect::<Vec<_>>());
    let start = Instant::now();
    let answered = subject.acquire(ops[0]);
    let waited = start.elapsed();
    assert!(
        matches!(&answered, Err(SubjectError::Broken(m)) if m.contains("REDIS_URL")),
        "{answered:?}"
    );
    assert!(
        waited >= DEADLINE && waited < DEADLINE + Duration::from_secs(5),
        "answered after {waited:?}"
    );
    // The connection is out of step: the cleanup does not wait on it for a second deadline.
    let start = Instant::now();
    drop(subject);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "the drop waited {:?}",
        start.elapsed()
    );
}
