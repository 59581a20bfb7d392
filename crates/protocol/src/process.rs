//! One child process speaking the protocol: started from a [`Command`], greeted once, and then a
//! pipe of requests out and replies in, every part of it with a deadline and a cap.
//!
//! Owns the child (the leader of a process group of its own), the thread that writes its stdin (so
//! a child that stops reading never blocks the harness), the thread that reads its stdout in capped
//! lines into a bounded queue, the thread that keeps the last (clipped) lines of its stderr, and on
//! Linux a watchdog of the group's memory. Promises: every way the child can break (exit, silence
//! past the timeout, not reading, a line over the cap, a line that is not UTF-8 or not a reply, an
//! id out of order, a reply of the wrong shape, memory over its cap) is a [`Broken`] naming what it
//! did and the request, carrying the child's last stderr lines, within the per-request timeout; the
//! harness's own memory for a child is bounded by the caps whatever the child sends; a broken or
//! dropped child is killed with its whole process group. A reply is never guessed.

use std::collections::VecDeque;
use std::io::{BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::lines::{Line, LineReader, Overflow};
use super::reply::Reply;
use super::wire::{Capabilities, Request, VERSIONS};
use bucketproof_trace::profile::Profile;
use bucketproof_trace::subject_file::Command;

/// Stderr lines kept for messages.
const STDERR_LINES: usize = 20;

/// Each kept stderr line is clipped to this many bytes.
const STDERR_LINE_BYTES: usize = 1024;

/// The most reply bytes read ahead of the harness: the queue holds this divided by the line cap
/// lines (at least two), so a child that floods its stdout waits on its own pipe, not on our heap.
const QUEUE_BYTES: usize = 32 << 20;

/// An environment variable naming a file to which every request (`> ` line) and reply (`< ` line) is
/// appended: for debugging an adapter, and for holding real sessions to the protocol's JSON Schema.
pub const TRANSCRIPT_ENV: &str = "BUCKETPROOF_PROTOCOL_TRANSCRIPT";

/// The child broke the protocol or died: a harness error, never a verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken(pub String);

/// What the child said in its handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// What it answers.
    pub capabilities: Capabilities,
    /// What it promises.
    pub profile: Profile,
}

/// A running child.
pub struct Process {
    command: Command,
    child: Child,
    stdin: Option<StdinWriter>,
    lines: Receiver<std::io::Result<Line>>,
    /// Bytes of a stdout line that arrived without their newline yet.
    partial: Arc<AtomicUsize>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    stderr_reader: std::thread::JoinHandle<()>,
    watchdog: Watchdog,
    next_id: u64,
    /// Ids written and not yet answered, in order.
    outstanding: VecDeque<u64>,
    transcript: Option<std::fs::File>,
    /// The handshake's answer.
    pub hello: Hello,
}

/// The child's stdin, written by a thread of its own: a write never blocks the harness, and what
/// the child has not read yet is counted.
struct StdinWriter {
    sender: Sender<Vec<u8>>,
    /// Bytes handed over and not yet taken by the child.
    unwritten: Arc<AtomicUsize>,
    /// Why the last write failed, once one has.
    failed: Arc<Mutex<Option<std::io::Error>>>,
}

impl StdinWriter {
    fn start(mut stdin: ChildStdin) -> StdinWriter {
        let (sender, receiver) = channel::<Vec<u8>>();
        let unwritten = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(Mutex::new(None));
        let (left, error) = (Arc::clone(&unwritten), Arc::clone(&failed));
        std::thread::spawn(move || {
            for bytes in receiver {
                if let Err(e) = stdin.write_all(&bytes).and_then(|()| stdin.flush()) {
                    *error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                    return;
                }
                left.fetch_sub(bytes.len(), Ordering::Relaxed);
            }
            // The sender is gone: dropping `stdin` here closes the child's stdin.
        });
        StdinWriter {
            sender,
            unwritten,
            failed,
        }
    }

    fn failure(&self) -> Option<String> {
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.as_ref().map(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => "closed its stdin (stopped reading requests)".into(),
            _ => format!("cannot write to its stdin: {e}"),
        })
    }
}

/// Watches the memory of the child's process group and kills the group past the cap.
struct Watchdog {
    stop: Arc<AtomicBool>,
    /// What the watchdog saw, once it killed the group.
    verdict: Arc<Mutex<Option<String>>>,
}

impl Watchdog {
    fn start(group: u32, cap: u64) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let verdict = Arc::new(Mutex::new(None));
        #[cfg(target_os = "linux")]
        {
            let (stop, verdict) = (Arc::clone(&stop), Arc::clone(&verdict));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                    let Some(used) = memory::group_resident_bytes(group) else {
                        return; // the group is gone
                    };
                    if used > cap {
                        *verdict.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                            "used {} MiB of memory, over its cap of {} MiB (max_memory_mib in \
                             its subject file)",
                            used >> 20,
                            cap >> 20
                        ));
                        kill_group(group);
                        return;
                    }
                }
            });
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (group, cap);
        Watchdog { stop, verdict }
    }

    fn verdict(&self) -> Option<String> {
        self.verdict
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Kills every process of the group `group` (the child and all it started and did not move out).
fn kill_group(group: u32) {
    #[cfg(unix)]
    if let Ok(group) = libc::pid_t::try_from(group) {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
    #[cfg(not(unix))]
    let _ = group;
}

#[cfg(target_os = "linux")]
mod memory {
    //! The resident memory of a process group, read from `/proc` (hand-written: twenty lines of
    //! parsing, where a crate for all of procfs would be the larger thing to trust).

    /// The resident bytes of every process in `group`, or `None` when no process is in it.
    pub fn group_resident_bytes(group: u32) -> Option<u64> {
        // SAFETY: sysconf has no preconditions.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let mut found = false;
        let mut pages = 0u64;
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // After the command name (in parentheses, which may hold anything): the state is
            // field 3, the process group field 5, the resident pages field 24.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(group) {
                found = true;
                pages += fields
                    .get(21)
                    .and_then(|r| r.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        found.then_some(pages.saturating_mul(page))
    }
}

impl Process {
    /// Starts `command` and greets it.
    pub fn start(command: &Command) -> Result<Process, Broken> {
        let mut spawn = std::process::Command::new(&command.program);
        spawn
            .args(&command.args)
            .envs(&command.env)
            .current_dir(&command.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A group of its own, so that a broken child is killed with everything it started.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut spawn, 0);
        let mut child = spawn.spawn().map_err(|e| {
            Broken(format!(
                "cannot start subject {}: {e} (directory {})",
                command.display(),
                command.cwd.display()
            ))
        })?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let stdin = child.stdin.take().expect("piped");
        let cap = command.max_line_bytes.max(1);
        let (sender, lines) = sync_channel((QUEUE_BYTES / cap).max(2));
        let mut reader = LineReader::new(BufReader::new(stdout), cap, Overflow::Stop);
        let partial = reader.partial();
        std::thread::spawn(move || {
            loop {
                let line = reader.read();
                let last = !matches!(line, Ok(Line::Text(_)));
                if sender.send(line).is_err() || last {
                    return;
                }
            }
        });
        let kept = Arc::new(Mutex::new(VecDeque::new()));
        let sink = Arc::clone(&kept);
        let stderr_reader = std::thread::spawn(move || {
            let mut reader =
                LineReader::new(BufReader::new(stderr), STDERR_LINE_BYTES, Overflow::Clip);
            loop {
                let line = match reader.read() {
                    Ok(Line::Text(line)) => line,
                    Ok(Line::NotUtf8 { start, .. }) => start,
                    _ => return,
                };
                let mut kept = sink.lock().unwrap_or_else(|e| e.into_inner());
                if kept.len() == STDERR_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        let watchdog = Watchdog::start(child.id(), command.max_memory_bytes);
        let mut process = Process {
            command: command.clone(),
            stdin: Some(StdinWriter::start(stdin)),
            child,
            lines,
            partial,
            stderr: kept,
            stderr_reader,
            watchdog,
            next_id: 0,
            outstanding: VecDeque::new(),
            transcript: std::env::var_os(TRANSCRIPT_ENV).and_then(|path| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .ok()
            }),
            hello: Hello {
                name: String::new(),
                version: String::new(),
                capabilities: Capabilities {
                    reconfigure: false,
                    forget: false,
                    sweep: false,
                    inspect: false,
                    would_allow: false,
                    request_ids: false,
                    evicts: false,
                    batch: 1,
                    bandwidths: 1,
                    settle: false,
                },
                profile: Profile::exact(),
            },
        };
        process.greet()?;
        Ok(process)
    }

    fn greet(&mut self) -> Result<(), Broken> {
        let id = self.next_id();
        let hello = Request::Hello {
            id,
            protocol: VERSIONS.to_vec(),
        };
        self.write(std::slice::from_ref(&hello))?;
        let reply = self.read(&hello)?;
        if let Some(error) = &reply.error {
            return Err(self.broken(format!(
                "refused the handshake ({}: {}); this harness speaks protocol {VERSIONS:?}",
                error.kind, error.message
            )));
        }
        let version = reply.protocol.unwrap_or(0);
        if !VERSIONS.contains(&version) {
            return Err(self.broken(format!(
                "chose protocol {version}, which this harness did not offer ({VERSIONS:?})"
            )));
        }
        let capabilities = reply.capabilities.expect("checked shape");
        if capabilities.batch == 0 || capabilities.bandwidths == 0 {
            return Err(
                self.broken("declared a batch or bandwidth count of 0 (each is at least 1)".into())
            );
        }
        self.hello = Hello {
            name: reply.name.unwrap_or_default(),
            version: reply.version.unwrap_or_default(),
            capabilities,
            profile: reply.profile.unwrap_or_default(),
        };
        self.hello
            .profile
            .tolerance()
            .map_err(|e| self.broken(e.to_string()))?;
        Ok(())
    }

    /// The next request id.
    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Requests written and not yet answered.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Hands `requests` to the writer as one write; never blocks on the child.
    pub fn write(&mut self, requests: &[Request]) -> Result<(), Broken> {
        let mut out = Vec::new();
        for request in requests {
            serde_json::to_writer(&mut out, request).expect("plain data serializes");
            out.push(b'\n');
            self.outstanding.push_back(request.id());
        }
        if let Some(transcript) = self.transcript.as_mut() {
            for line in out.split_inclusive(|&b| b == b'\n') {
                let _ = transcript
                    .write_all(b"> ")
                    .and_then(|()| transcript.write_all(line));
            }
        }
        let Some(stdin) = self.stdin.as_ref() else {
            return Err(self.broken("its stdin is closed".into()));
        };
        if let Some(failure) = stdin.failure() {
            return Err(self.broken(failure));
        }
        stdin.unwritten.fetch_add(out.len(), Ordering::Relaxed);
        if stdin.sender.send(out).is_err() {
            let failure = stdin
                .failure()
                .unwrap_or_else(|| "its stdin is closed".into());
            return Err(self.broken(failure));
        }
        Ok(())
    }

    /// Reads the reply to `request`, the oldest outstanding one, and holds it to its shape.
    pub fn read(&mut self, request: &Request) -> Result<Reply, Broken> {
        let expected = self.outstanding.pop_front();
        debug_assert_eq!(expected, Some(request.id()), "replies are read in order");
        let what = format!("{} (id {})", request.op(), request.id());
        let line = self.next_line(&what)?;
        let reply: Reply = serde_json::from_str(&line).map_err(|e| {
            self.broken(format!(
                "answered {what} with a line that is not a reply ({e}): {}",
                clipped(&line)
            ))
        })?;
        if reply.id != request.id() {
            return Err(self.broken(format!(
                "answered out of order: expected the reply to {what}, got id {}",
                reply.id
            )));
        }
        reply.check_shape(request).map_err(|what| {
            self.broken(format!("{what} (id {}): {}", request.id(), clipped(&line)))
        })?;
        Ok(reply)
    }

    /// Reads and drops the replies to every outstanding request.
    pub fn drain(&mut self) -> Result<(), Broken> {
        while let Some(id) = self.outstanding.pop_front() {
            self.next_line(&format!("a request being drained (id {id})"))?;
        }
        Ok(())
    }

    /// The next stdout line, within the timeout; `what` names the request it answers.
    fn next_line(&mut self, what: &str) -> Result<String, Broken> {
        let timeout = self.command.timeout;
        let failure = match self.lines.recv_timeout(timeout) {
            Ok(Ok(Line::Text(line))) => {
                if let Some(transcript) = self.transcript.as_mut() {
                    let _ = writeln!(transcript, "< {line}");
                }
                return Ok(line);
            }
            Ok(Ok(Line::TooLong { cap })) => format!(
                "answered {what} with a line over the cap of {cap} bytes (max_line_bytes in its \
                 subject file)"
            ),
            Ok(Ok(Line::NotUtf8 { at, start })) => format!(
                "answered {what} with a line that is not UTF-8 (invalid byte at offset {at}): {}",
                clipped(&start)
            ),
            Ok(Err(e)) => format!("cannot read its stdout: {e}"),
            Ok(Ok(Line::End)) | Err(RecvTimeoutError::Disconnected) => {
                format!("closed its stdout before answering {what}")
            }
            Err(RecvTimeoutError::Timeout) => {
                let unread = self
                    .stdin
                    .as_ref()
                    .map_or(0, |stdin| stdin.unwritten.load(Ordering::Relaxed));
                let partial = self.partial.load(Ordering::Relaxed);
                if let Some(failure) = self.stdin.as_ref().and_then(StdinWriter::failure) {
                    format!("{failure}; no reply to {what} within {timeout:?}")
                } else if partial > 0 {
                    format!(
                        "wrote {partial} bytes of a line but no newline, and no reply to {what} \
                         within {timeout:?}"
                    )
                } else if unread > 0 {
                    format!(
                        "stopped reading its stdin: {unread} bytes of requests still unread, \
                         and no reply to {what} within {timeout:?}"
                    )
                } else {
                    format!("stopped answering: no reply to {what} within {timeout:?}")
                }
            }
        };
        Err(self.broken(failure))
    }

    /// A [`Broken`] naming the subject, with how the child ended (if it did) and its last stderr
    /// lines. The child's process group is killed: a broken child is never used again.
    pub fn broken(&mut self, what: String) -> Broken {
        // Give a dying child a moment, so its exit code and last words make the message.
        let mut status = None;
        for _ in 0..20 {
            if let Ok(Some(exited)) = self.child.try_wait() {
                status = Some(exited);
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut message = format!(
            "subject {} broke the protocol: {what}",
            self.command.display()
        );
        if let Some(memory) = self.watchdog.verdict() {
            message.push_str(&format!("; it {memory}, and was killed"));
        }
        match status {
            Some(status) => {
                message.push_str(&format!("; it exited ({status})"));
                // Its stderr ends with it: let the reader catch its last words.
                for _ in 0..40 {
                    if self.stderr_reader.is_finished() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            None => {
                message.push_str("; it was still running, and was killed with its process group")
            }
        }
        kill_group(self.child.id());
        let kept = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_empty() {
            message.push_str("; its stderr was empty");
        } else {
            message.push_str("; its last stderr lines:");
            for line in kept.iter() {
                message.push_str("\n    ");
                message.push_str(line);
            }
        }
        Broken(message)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Closing stdin (once what was written is taken) asks the child to exit; one that does not,
        // and anything it started, is killed.
        self.stdin.take();
        for _ in 0..20 {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Even after the leader exited: what it started may still hold the group. The group's id
        // is not handed to a new process while any member is alive.
        kill_group(self.child.id());
        let _ = self.child.wait();
    }
}

/// A line cut to a readable length for a message.
fn clipped(line: &str) -> String {
    const MAX: usize = 200;
    match line.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_owned(),
    }
}
