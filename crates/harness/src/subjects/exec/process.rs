//! One child process speaking the protocol: started from a [`Command`], greeted once, and then a
//! pipe of requests out and replies in.
//!
//! Owns the child, the thread that reads its stdout line by line (so a subject that answers while the
//! harness is still writing a batch never blocks on a full pipe) and the thread that keeps the last
//! lines of its stderr. Promises: every way the child can break (exit, silence past the timeout, a
//! line that is not a reply, an id out of order, a reply of the wrong shape) is a [`Broken`] naming
//! the request and carrying the child's last stderr lines; a reply is never guessed.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::spec::Command;
use super::wire::{Capabilities, Reply, Request, VERSIONS};
use crate::profile::Profile;

/// Stderr lines kept for messages.
const STDERR_LINES: usize = 20;

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
    stdin: Option<ChildStdin>,
    lines: Receiver<std::io::Result<String>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    stderr_reader: std::thread::JoinHandle<()>,
    next_id: u64,
    /// Ids written and not yet answered, in order.
    outstanding: VecDeque<u64>,
    out: Vec<u8>,
    transcript: Option<std::fs::File>,
    /// The handshake's answer.
    pub hello: Hello,
}

impl Process {
    /// Starts `command` and greets it.
    pub fn start(command: &Command) -> Result<Process, Broken> {
        let mut child = std::process::Command::new(&command.program)
            .args(&command.args)
            .envs(&command.env)
            .current_dir(&command.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                Broken(format!(
                    "cannot start subject {}: {e} (directory {})",
                    command.display(),
                    command.cwd.display()
                ))
            })?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let end = line.is_err();
                if sender.send(line).is_err() || end {
                    break;
                }
            }
        });
        let kept = Arc::new(Mutex::new(VecDeque::new()));
        let sink = Arc::clone(&kept);
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut kept = sink.lock().unwrap_or_else(|e| e.into_inner());
                if kept.len() == STDERR_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        let mut process = Process {
            command: command.clone(),
            stdin: child.stdin.take(),
            child,
            lines,
            stderr: kept,
            stderr_reader,
            next_id: 0,
            outstanding: VecDeque::new(),
            out: Vec::new(),
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

    /// Writes `requests` in one write.
    pub fn write(&mut self, requests: &[Request]) -> Result<(), Broken> {
        self.out.clear();
        for request in requests {
            serde_json::to_writer(&mut self.out, request).expect("plain data serializes");
            self.out.push(b'\n');
            self.outstanding.push_back(request.id());
        }
        if let Some(transcript) = self.transcript.as_mut() {
            for line in self.out.split_inclusive(|&b| b == b'\n') {
                let _ = transcript
                    .write_all(b"> ")
                    .and_then(|()| transcript.write_all(line));
            }
        }
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(self.broken("its stdin is closed".into()));
        };
        let written = stdin.write_all(&self.out).and_then(|()| stdin.flush());
        written.map_err(|e| self.broken(format!("cannot write to it: {e}")))
    }

    /// Reads the reply to `request`, the oldest outstanding one, and holds it to its shape.
    pub fn read(&mut self, request: &Request) -> Result<Reply, Broken> {
        let expected = self.outstanding.pop_front();
        debug_assert_eq!(expected, Some(request.id()), "replies are read in order");
        let line = match self.lines.recv_timeout(self.command.timeout) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => return Err(self.broken(format!("cannot read its stdout: {e}"))),
            Err(RecvTimeoutError::Timeout) => {
                return Err(self.broken(format!(
                    "no reply to {} (id {}) within {:?}",
                    request.op(),
                    request.id(),
                    self.command.timeout
                )));
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(self.broken(format!(
                    "closed its stdout before answering {} (id {})",
                    request.op(),
                    request.id()
                )));
            }
        };
        if let Some(transcript) = self.transcript.as_mut() {
            let _ = writeln!(transcript, "< {line}");
        }
        let reply: Reply = serde_json::from_str(&line).map_err(|e| {
            self.broken(format!(
                "answered {} (id {}) with a line that is not a reply ({e}): {}",
                request.op(),
                request.id(),
                clipped(&line)
            ))
        })?;
        if reply.id != request.id() {
            return Err(self.broken(format!(
                "answered out of order: expected the reply to {} (id {}), got id {}",
                request.op(),
                request.id(),
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
        while self.outstanding.pop_front().is_some() {
            match self.lines.recv_timeout(self.command.timeout) {
                Ok(Ok(line)) => {
                    if let Some(transcript) = self.transcript.as_mut() {
                        let _ = writeln!(transcript, "< {line}");
                    }
                }
                _ => return Err(self.broken("stopped answering while being drained".into())),
            }
        }
        Ok(())
    }

    /// A [`Broken`] naming the subject, with how the child ended (if it did) and its last stderr lines.
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
        if let Some(status) = status {
            message.push_str(&format!("; it exited ({status})"));
            // Its stderr ends with it: let the reader catch its last words.
            for _ in 0..40 {
                if self.stderr_reader.is_finished() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
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
        // Closing stdin asks the child to exit; one that does not is killed.
        self.stdin.take();
        for _ in 0..20 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
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
