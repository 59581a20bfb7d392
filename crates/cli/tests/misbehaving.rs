//! The gate left unattended with a child that misbehaves: every way of breaking the protocol ends in
//! exit 2 within the per-request timeout plus a few seconds, with a message naming what the child
//! did, the gate's peak memory under 256 MB, and the child's whole process group killed.
//!
//! The child (`tests/fixtures/misbehaving.py`) proxies `bucketproof serve core`, a correct limiter
//! that declares batches of 1024, for a few replies, then misbehaves; each case runs one gate on a
//! scenario long enough that a batch is larger than a pipe holds.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{command, scratch, text, workspace};

/// The per-request timeout the cases run with.
const TIMEOUT: Duration = Duration::from_secs(1);
/// What the gate may take past the timeout to say so and clean up.
const GRACE: Duration = Duration::from_secs(5);
/// The gate's peak resident memory, whatever the child does.
const PEAK_BYTES: u64 = 256 << 20;
/// A gate still running after this is hung: killed, and the case fails.
const HUNG: Duration = Duration::from_secs(40);

struct Ended {
    code: Option<i32>,
    output: String,
    took: Duration,
    /// The largest resident set of the gate (or of a child it waited for: all far smaller).
    peak_bytes: u64,
}

/// Runs `bucketproof check` on one scenario through the misbehaving child in `mode`, with `extra`
/// lines in its subject file.
fn gate_with(mode: &str, extra: &str) -> (Ended, PathBuf) {
    let dir = scratch(&format!("misbehaving-{mode}"));
    for sub in ["scenarios", "subjects"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::copy(
        workspace().join("scenarios/exact-refill.toml"),
        dir.join("scenarios/exact-refill.toml"),
    )
    .unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/misbehaving.py");
    let pids = dir.join("pids");
    std::fs::write(
        dir.join("subjects/child.toml"),
        format!(
            "command = \"python3\"\nargs = [{:?}, {:?}, {mode:?}, {:?}]\ntimeout = \"{}ms\"\n{extra}",
            fixture.to_str().unwrap(),
            env!("CARGO_BIN_EXE_bucketproof"),
            pids.to_str().unwrap(),
            TIMEOUT.as_millis()
        ),
    )
    .unwrap();
    let mut gate = command(&dir);
    gate.args(["check", "--subject", "child"]);
    (measured(gate, &dir, None), pids)
}

/// Runs `command` to its end (killed once hung) with its output in `dir`, `input` on its stdin.
fn measured(mut command: std::process::Command, dir: &Path, input: Option<&Path>) -> Ended {
    let out = dir.join("out.txt");
    let started = Instant::now();
    let stdin = match input {
        Some(path) => std::process::Stdio::from(std::fs::File::open(path).unwrap()),
        None => std::process::Stdio::null(),
    };
    // Reaped below by wait4, which also gives its peak memory (std's wait does not).
    #[allow(clippy::zombie_processes)]
    let child = command
        .stdin(stdin)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(dir.join("err.txt")).unwrap())
        .spawn()
        .unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let watch = Arc::clone(&done);
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < HUNG {
            if watch.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: signals the process this test started, which is not reaped yet.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    done.store(true, Ordering::Relaxed);
    assert_eq!(waited, pid, "wait4 failed");
    let took = started.elapsed();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let output = format!(
        "{}{}",
        text(&std::fs::read(&out).unwrap()),
        text(&std::fs::read(dir.join("err.txt")).unwrap())
    );
    Ended {
        code,
        output,
        took,
        // ru_maxrss is in KiB on Linux.
        peak_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
    }
}

/// True while `pid` names a live process (a zombie is dead: it only waits to be reaped).
fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn assert_ends_broken(mode: &str, expected: &str) {
    assert_ends_broken_with(mode, "", expected);
}

fn assert_ends_broken_with(mode: &str, extra: &str, expected: &str) {
    let (ended, pids) = gate_with(mode, extra);
    let all = &ended.output;
    assert_eq!(
        ended.code,
        Some(2),
        "{mode}: exit {:?} after {:?}: {all}",
        ended.code,
        ended.took
    );
    assert!(all.contains("broke the protocol"), "{mode}: {all}");
    assert!(
        all.contains(expected),
        "{mode}: expected {expected:?} in {all}"
    );
    assert!(
        ended.took <= TIMEOUT + GRACE,
        "{mode}: took {:?}, more than the timeout {TIMEOUT:?} + {GRACE:?}",
        ended.took
    );
    assert!(
        ended.peak_bytes < PEAK_BYTES,
        "{mode}: peak memory {} MB",
        ended.peak_bytes >> 20
    );
    // The child and the grandchild it started are gone with the gate.
    let pids = std::fs::read_to_string(&pids).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(2);
    for pid in pids.split_whitespace() {
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(pid), "{mode}: process {pid} outlived the gate");
    }
    eprintln!(
        "{mode}: exit 2 in {:.1} s, peak {} MB",
        ended.took.as_secs_f64(),
        ended.peak_bytes >> 20
    );
}

#[test]
fn a_child_that_stops_reading_is_named_within_the_timeout() {
    assert_ends_broken("stops-reading", "stopped reading its stdin");
}

#[test]
fn a_child_that_stops_answering_is_named_within_the_timeout() {
    assert_ends_broken("stops-answering", "stopped answering");
}

#[test]
fn a_child_that_closes_its_stdout_and_stays_alive_is_named() {
    assert_ends_broken("closes-stdout", "closed its stdout");
}

#[test]
fn a_child_that_spews_log_lines_is_not_a_reply_and_costs_no_memory() {
    assert_ends_broken("spews", "not a reply");
}

#[test]
fn a_child_that_sends_huge_lines_is_stopped_at_the_line_cap() {
    assert_ends_broken("huge-line", "over the cap of 65536 bytes");
}

#[test]
fn a_child_that_never_ends_its_line_is_named() {
    assert_ends_broken("no-newline", "no newline");
}

#[test]
fn a_child_that_sends_invalid_utf8_is_named() {
    assert_ends_broken("invalid-utf8", "not UTF-8");
}

#[test]
fn a_child_that_chooses_a_wrong_version_is_named() {
    assert_ends_broken("wrong-version", "chose protocol 9");
}

#[test]
fn a_child_that_exits_mid_batch_is_named_with_its_last_words() {
    assert_ends_broken("exits-mid-batch", "giving up mid-batch");
}

#[test]
fn a_child_that_ignores_sigterm_is_killed_with_its_group() {
    assert_ends_broken("ignores-sigterm", "stopped reading its stdin");
}

#[test]
fn a_child_over_its_memory_cap_is_killed_and_named() {
    assert_ends_broken_with(
        "hogs-memory",
        "max_memory_mib = 100\n",
        "over its cap of 100 MiB",
    );
}

#[test]
fn serve_refuses_a_huge_line_without_buffering_it() {
    let dir = scratch("serve-huge-line");
    let input = dir.join("input");
    let mut line = vec![b'x'; 40 << 20];
    line.push(b'\n');
    std::fs::write(&input, &line).unwrap();
    drop(line);
    let mut serve = command(&dir);
    serve.args(["serve", "core"]);
    let ended = measured(serve, &dir, Some(&input));
    assert_eq!(ended.code, Some(2), "{}", ended.output);
    assert!(
        ended.output.contains("line 1") && ended.output.contains("longer than 65536 bytes"),
        "{}",
        ended.output
    );
    assert!(
        ended.peak_bytes < 64 << 20,
        "serve held {} MB for one line",
        ended.peak_bytes >> 20
    );
}
