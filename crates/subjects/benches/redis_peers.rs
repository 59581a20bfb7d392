//! Decisions per second through one Redis: our transition script against third parties' limiter
//! scripts, every one sent by the same client loop, in the same run.
//!
//! Subjects (each a Lua script called by `EVALSHA`):
//! - `bucketproof`: our one-bandwidth transition (`bucket.lua`), its words built by
//!   `RedisLimiter::script_call` (server time, no request id), exactly what `acquire` sends;
//! - `redis-gcra`: the GCRA script of go-redis/redis_rate and the `redis-rate` crate, read from the
//!   `redis-rate` package (`peers/redis-gcra.toml`: its keys and arguments as the crate builds them);
//! - `upstash-token-bucket`: @upstash/ratelimit's token-bucket script, read from the npm package
//!   (`peers/upstash-token-bucket.toml`; `peers/install` puts it there), time passed as an argument;
//! - `floor-time-get-set`: `TIME`, `GET`, `SET .. PX`, `return 1`: what any script that reads the
//!   server's clock and a state, and writes the state back with a TTL, costs before any arithmetic;
//! - `redis-cell`: the `CL.THROTTLE` command of the redis-cell module (GCRA in native code), when the
//!   server has it loaded (`peers/build-redis-cell` builds it from its crates.io package).
//!
//! What is equalized: one connection and one client loop for all (a `redis::Pipeline` of `EVALSHA`
//! commands, `CL.THROTTLE` for the module, or one command per round trip); the same key sequence (one hot key, or a ChaCha8
//! sequence over 10,000 keys, fixed seed); the same config, expressed in each script's own
//! arguments, and cost 1; every key created before timing by an untimed first call and alive for the
//! whole phase (TTLs of minutes), so every timed call decides on an existing key; the same decision
//! mix, printed per phase: `allowed` (capacity 5,000,000 refilling 1,000/s, the first call takes
//! 1,000,000: every call admitted, the bucket never near full) or `denied` (capacity 10 refilling 1 per
//! day, emptied by the first call: every call denied).
//! Subjects take turns within each round, in a rotating order, so drift hits all alike; each ratio is
//! ours / peer within one round, and the table gives the median round.
//!
//! Two figures per phase: the client's decisions per second (client and server share this machine's
//! two cores), and the server's own time per call (`INFO commandstats`, `cmdstat_evalsha` or
//! `cmdstat_cl.throttle` `usec_per_call`, after `CONFIG RESETSTAT`): the server-bound figure, which no client cost moves.
//!
//! Needs `REDIS_URL` (prints a SKIP line and measures nothing without it) and the peers installed
//! (`peers/install`). Run from a clone:
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo bench -p bucketproof-harness --bench redis_peers`
//! (`-- --quick` for a short run; `-- --only NAME` runs one subject and `-- --calls N` sets the timed
//! calls per phase, for instruction counts of a Redis under callgrind: see reports/bench-redis.md;
//! `REDIS_PEERS_SCRIPT=FILE` runs an edited copy of our script, prelude included, in its place).

use std::path::{Path, PathBuf};
use std::time::Instant;

use bucketproof_limiter::{Config, Rate, Request};
use bucketproof_redis::RedisLimiter;
use bucketproof_redis::script::Reply;
use bucketproof_subjects::script::args::{Context, OpValues};
use bucketproof_subjects::script::source::script_body;
use bucketproof_subjects::script::spec::ScriptSpec;
use bucketproof_subjects::script::{TimeMode, reply::ReplyMap};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use redis::{Connection, Value};

/// How calls reach Redis.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `depth` commands per round trip.
    Pipelined { depth: usize },
    /// One command per round trip.
    Single,
}

impl Mode {
    fn name(self) -> String {
        match self {
            Mode::Pipelined { depth } => format!("pipelined x{depth}"),
            Mode::Single => "one per round trip".to_owned(),
        }
    }
}

/// The decision mix of a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mix {
    Allowed,
    Denied,
}

impl Mix {
    fn config(self) -> Config {
        match self {
            Mix::Allowed => Config::new(5_000_000, Rate::per_second(1000)).unwrap(),
            Mix::Denied => Config::new(10, Rate::new(1, 86_400).unwrap()).unwrap(),
        }
    }

    /// The untimed first call on each key. It takes a fifth of the bucket (`allowed`), so the bucket
    /// stays far from full and its TTL long (a bucket near full expires within milliseconds, and the
    /// timed calls would measure key creation), or all of it (`denied`).
    fn first_cost(self) -> u64 {
        match self {
            Mix::Allowed => 1_000_000,
            Mix::Denied => 10,
        }
    }
}

/// KEYS and ARGV of one call, for (key, cost, now in ns since the Unix epoch).
type Words = Box<dyn Fn(&str, u64, u64) -> (Vec<String>, Vec<Vec<u8>>)>;

/// One script (or module command) with its way of building a call and of reading the decision from
/// the reply.
struct Subject {
    name: &'static str,
    /// The script's SHA1 (`EVALSHA`), or `None` for a module command whose name is `KEYS`' first word
    /// (see `cell`).
    sha: Option<String>,
    call: Words,
    allowed: Box<dyn Fn(&Value) -> bool>,
}

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn load(connection: &mut Connection, text: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(text)
        .query(connection)
        .expect("SCRIPT LOAD")
}

/// Our script, through `RedisLimiter::script_call` (the words `acquire` sends).
fn ours(connection: &mut Connection, url: &str, config: Config, prefix: &str) -> Subject {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limiter = runtime
        .block_on(
            RedisLimiter::builder(config)
                .prefix(prefix)
                .recovery(bucketproof_redis::Recovery::Trusting)
                .connect(url),
        )
        .expect("connect the RedisLimiter");
    // `REDIS_PEERS_SCRIPT`: a variant of our script (prelude.lua and bucket.lua in one file, edited)
    // run in its place with the same words, to measure what a change of the script would save.
    let sha = match std::env::var_os("REDIS_PEERS_SCRIPT") {
        Some(path) => load(
            connection,
            &std::fs::read_to_string(&path).expect("REDIS_PEERS_SCRIPT: a readable Lua file"),
        ),
        None => load(connection, bucketproof_redis::script::SOURCE),
    };
    Subject {
        name: "bucketproof",
        sha: Some(sha),
        call: Box::new(move |key, cost, _now| {
            let call = limiter
                .script_call(key, Request::cost(cost))
                .expect("one bandwidth");
            (call.keys, call.args)
        }),
        allowed: Box::new(|value| {
            let raw: Vec<i64> = redis::from_redis_value_ref(value).expect("integers");
            Reply::parse(raw).expect("a reply of bucket.lua").allowed
        }),
    }
}

/// A third party's script, described by a peers/*.toml file.
fn peer(
    connection: &mut Connection,
    name: &'static str,
    file: &str,
    config: Config,
    prefix: &str,
) -> Subject {
    let root = project_root();
    let spec = ScriptSpec::load(&root.join(file)).expect("the peer's description");
    let body = script_body(&spec, &root).unwrap_or_else(|e| {
        panic!("{e} (run peers/install first)");
    });
    let sha = load(connection, &body);
    let context = Context {
        capacity: config.capacity(),
        rate_numer: config.rate().numer(),
        rate_denom: config.rate().denom(),
        unit: spec.unit,
        epoch_s: 0,
        max_integer: spec.max_integer,
        max_time: spec.max_time,
        configs: spec.configs,
    };
    assert!(
        spec.time == TimeMode::Server || spec.time == TimeMode::Argument,
        "{file}: a time mode the bench does not drive"
    );
    let (keys, argv, reply, unit) = (spec.keys, spec.argv, spec.reply, spec.unit);
    let prefix = prefix.to_owned();
    Subject {
        name,
        sha: Some(sha),
        call: Box::new(move |key, cost, now| {
            let key = format!("{prefix}{{{key}}}");
            let op = OpValues {
                key: &key,
                cost,
                now,
            };
            let fill = |templates: &[String]| -> Vec<String> {
                templates
                    .iter()
                    .map(|t| context.fill(t, op).expect("a value the script takes"))
                    .collect()
            };
            let args = fill(&argv).into_iter().map(String::into_bytes).collect();
            (fill(&keys), args)
        }),
        allowed: Box::new(move |value| observe(&reply, value, unit)),
    }
}

fn observe(reply: &ReplyMap, value: &Value, unit: u64) -> bool {
    reply
        .observe(value, unit)
        .expect("the reply mapping")
        .allowed
}

/// The floor: server time, one read, one write with a TTL, no arithmetic.
fn floor(connection: &mut Connection, prefix: &str) -> Subject {
    let sha = load(
        connection,
        "local now = redis.call('TIME') local state = redis.call('GET', KEYS[1]) \
         redis.call('SET', KEYS[1], '1234567890123:123456789:1234567890123', 'PX', 600000) \
         return 1",
    );
    let prefix = prefix.to_owned();
    Subject {
        name: "floor-time-get-set",
        sha: Some(sha),
        call: Box::new(move |key, _cost, _now| (vec![format!("{prefix}{{{key}}}")], Vec::new())),
        allowed: Box::new(|value| matches!(value, Value::Int(1))),
    }
}

/// The command `subject` sends for one call: `EVALSHA sha n keys... args...`, or a module command.
/// redis-cell's `CL.THROTTLE key max_burst count period quantity` (a native module, GCRA in integer
/// nanoseconds), when the server has the module loaded (`peers/build-redis-cell`): the same bucket as
/// `max_burst = capacity - 1` (redis-cell admits `max_burst + 1` at once) and `count` per `period` s.
fn cell(connection: &mut Connection, config: Config, prefix: &str) -> Option<Subject> {
    let modules: Value = redis::cmd("MODULE").arg("LIST").query(connection).ok()?;
    if !format!("{modules:?}").contains("redis-cell") {
        return None;
    }
    let rate = config.rate();
    let (capacity, count, period) = (config.capacity(), rate.numer(), rate.denom());
    let prefix = prefix.to_owned();
    Some(Subject {
        name: "redis-cell",
        sha: None,
        call: Box::new(move |key, cost, _now| {
            let words = [capacity - 1, count, period, cost];
            (
                vec!["CL.THROTTLE".to_owned(), format!("{prefix}{{{key}}}")],
                words.iter().map(|w| w.to_string().into_bytes()).collect(),
            )
        }),
        // [limited, limit, remaining, retry_after, reset_after]: 0 = allowed.
        allowed: Box::new(|value| match value {
            Value::Array(items) => matches!(items.first(), Some(Value::Int(0))),
            _ => false,
        }),
    })
}

fn command(subject: &Subject, key: &str, cost: u64, now: u64) -> redis::Cmd {
    let (keys, args) = (subject.call)(key, cost, now);
    match &subject.sha {
        Some(sha) => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(sha).arg(keys.len()).arg(keys).arg(args);
            cmd
        }
        None => {
            let mut cmd = redis::cmd(&keys[0]);
            cmd.arg(&keys[1..]).arg(args);
            cmd
        }
    }
}

/// The `INFO commandstats` name of what `subject` sends.
fn stat_name(subject: &Subject) -> &'static str {
    match subject.sha {
        Some(_) => "evalsha",
        None => "cl.throttle",
    }
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos() as u64
}

/// What one timed phase measured.
#[derive(Clone, Copy, Debug)]
struct Phase {
    per_second: f64,
    server_us: f64,
    allowed: usize,
    /// The server's instructions per timed call, when it runs under callgrind.
    instructions: Option<f64>,
}

/// A Redis server under callgrind (`REDIS_CALLGRIND_PID`, and `REDIS_CALLGRIND_OUT`, its
/// `--callgrind-out-file`): its counters are zeroed after the untimed calls and dumped after the timed
/// ones, so the dump holds the timed calls alone (and the few commands around them).
struct Callgrind {
    pid: String,
    out: PathBuf,
}

impl Callgrind {
    fn from_env() -> Option<Callgrind> {
        Some(Callgrind {
            pid: std::env::var("REDIS_CALLGRIND_PID").ok()?,
            out: std::env::var_os("REDIS_CALLGRIND_OUT")?.into(),
        })
    }

    fn control(&self, flag: &str) {
        let status = std::process::Command::new("callgrind_control")
            .arg(flag)
            .arg(&self.pid)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("callgrind_control");
        assert!(status.success(), "callgrind_control {flag} {}", self.pid);
    }

    /// The instructions in the newest dump.
    fn dumped(&self) -> f64 {
        let dir = self.out.parent().unwrap_or(Path::new("."));
        let stem = self.out.file_name().unwrap().to_string_lossy().into_owned();
        let newest = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{stem}."))
            })
            .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
            .expect("a callgrind dump");
        let text = std::fs::read_to_string(newest.path()).unwrap();
        text.lines()
            .find_map(|l| {
                l.strip_prefix("summary: ")
                    .or_else(|| l.strip_prefix("totals: "))
            })
            .and_then(|n| n.trim().parse().ok())
            .expect("a summary line in the dump")
    }
}

fn server_usec_per_call(connection: &mut Connection, stat: &str) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(connection)
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{stat}:")))
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|field| field.strip_prefix("usec_per_call="))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Sends `keys` (names) through `subject` in `mode`, each key's first call untimed.
fn phase(
    connection: &mut Connection,
    subject: &Subject,
    mix: Mix,
    mode: Mode,
    distinct: &[String],
    sequence: &[usize],
    callgrind: Option<&Callgrind>,
) -> Phase {
    // Every key exists before timing (and, for `denied`, is emptied).
    let mut pipe = redis::pipe();
    for key in distinct {
        pipe.add_command(command(subject, key, mix.first_cost(), unix_ns()));
    }
    pipe.query::<Vec<Value>>(connection).expect("first calls");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(connection)
        .unwrap();
    if let Some(callgrind) = callgrind {
        callgrind.control("-z");
    }
    let mut allowed = 0;
    let start = Instant::now();
    match mode {
        Mode::Pipelined { depth } => {
            for chunk in sequence.chunks(depth) {
                let now = unix_ns();
                let mut pipe = redis::pipe();
                for &i in chunk {
                    pipe.add_command(command(subject, &distinct[i], 1, now));
                }
                let replies: Vec<Value> = pipe.query(connection).expect("a decision");
                allowed += replies.iter().filter(|r| (subject.allowed)(r)).count();
            }
        }
        Mode::Single => {
            for &i in sequence {
                let reply: Value = command(subject, &distinct[i], 1, unix_ns())
                    .query(connection)
                    .expect("a decision");
                allowed += usize::from((subject.allowed)(&reply));
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let instructions = callgrind.map(|callgrind| {
        callgrind.control("-d");
        callgrind.dumped() / sequence.len() as f64
    });
    let server_us = server_usec_per_call(connection, stat_name(subject));
    Phase {
        per_second: sequence.len() as f64 / elapsed,
        server_us,
        allowed,
        instructions,
    }
}

fn delete_prefix(connection: &mut Connection, prefix: &str) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(connection)
        .unwrap();
    for chunk in keys.chunks(1000) {
        let _: () = redis::cmd("UNLINK").arg(chunk).query(connection).unwrap();
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!("!!!!! SKIP redis_peers bench: REDIS_URL is not set, nothing measured !!!!!");
        return;
    };
    let args: Vec<String> = std::env::args().collect();
    // CI's smoke mode (`cargo test --benches`): every peer driven, figures meaningless.
    let smoke = std::env::var_os("BUCKETPROOF_BENCH_SMOKE").is_some();
    let quick = smoke || args.iter().any(|a| a == "--quick");
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let rounds = if quick { 1 } else { 3 };
    let calls = args
        .iter()
        .position(|a| a == "--calls")
        .and_then(|i| args.get(i + 1)?.parse::<usize>().ok());
    let (pipelined_calls, single_calls) = match calls {
        Some(calls) => (calls, calls),
        None if smoke => (200, 20),
        None if quick => (20_000, 2_000),
        None => (100_000, 10_000),
    };
    let client = redis::Client::open(url.as_str()).expect("REDIS_URL");
    let mut connection = client.get_connection().expect("connect to Redis");
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let uniform: Vec<usize> = (0..pipelined_calls)
        .map(|_| (rng.next_u64() % 10_000) as usize)
        .collect();
    let base = format!("bpbench:{}:", std::process::id());
    let callgrind = Callgrind::from_env();

    println!(
        "| mix | keys | mode | subject | k decisions/s (client) | server us/call | server instructions/call | allowed | ours / peer, client | ours / peer, server |"
    );
    println!("|---|---|---|---|---:|---:|---:|---|---:|---:|");
    for mix in [Mix::Allowed, Mix::Denied] {
        let config = mix.config();
        let mut subjects = vec![
            ours(&mut connection, &url, config, &format!("{base}ours:")),
            peer(
                &mut connection,
                "redis-gcra",
                "peers/redis-gcra.toml",
                config,
                &format!("{base}gcra:"),
            ),
            peer(
                &mut connection,
                "upstash-token-bucket",
                "peers/upstash-token-bucket.toml",
                config,
                &format!("{base}upstash:"),
            ),
            floor(&mut connection, &format!("{base}floor:")),
        ];
        match cell(&mut connection, config, &format!("{base}cell:")) {
            Some(cell) => subjects.push(cell),
            None => eprintln!(
                "redis-cell is not loaded in this Redis: CL.THROTTLE not measured \
                 (redis-server --loadmodule \"$(peers/build-redis-cell)\")"
            ),
        }
        if let Some(only) = &only {
            subjects.retain(|s| s.name == only.as_str());
            assert!(!subjects.is_empty(), "--only {only}: no such subject");
        }
        for (keys_name, distinct_count) in [("hot key", 1usize), ("10,000 uniform", 10_000)] {
            for mode in [Mode::Pipelined { depth: 64 }, Mode::Single] {
                let calls = match mode {
                    Mode::Pipelined { .. } => pipelined_calls,
                    Mode::Single => single_calls,
                };
                let sequence: Vec<usize> = if distinct_count == 1 {
                    vec![0; calls]
                } else {
                    uniform[..calls].to_vec()
                };
                let mut results: Vec<Vec<Phase>> = vec![Vec::new(); subjects.len()];
                for round in 0..rounds {
                    for turn in 0..subjects.len() {
                        let index = (turn + round) % subjects.len();
                        let distinct: Vec<String> = (0..distinct_count)
                            .map(|k| format!("r{round}k{k}"))
                            .collect();
                        let measured = phase(
                            &mut connection,
                            &subjects[index],
                            mix,
                            mode,
                            &distinct,
                            &sequence,
                            callgrind.as_ref(),
                        );
                        results[index].push(measured);
                    }
                    delete_prefix(&mut connection, &base);
                }
                for (index, subject) in subjects.iter().enumerate() {
                    let phases = &results[index];
                    let ratio = |f: fn(&Phase) -> f64, inverse: bool| -> f64 {
                        let mut per_round: Vec<f64> = (0..rounds)
                            .map(|r| {
                                let (a, b) = (f(&results[0][r]), f(&phases[r]));
                                if inverse { b / a } else { a / b }
                            })
                            .collect();
                        median(&mut per_round)
                    };
                    let mut rates: Vec<f64> = phases.iter().map(|p| p.per_second).collect();
                    let mut server: Vec<f64> = phases.iter().map(|p| p.server_us).collect();
                    let instructions = phases
                        .iter()
                        .filter_map(|p| p.instructions)
                        .map(|i| format!("{i:.0}"))
                        .collect::<Vec<_>>()
                        .join("/");
                    let allowed: Vec<String> =
                        phases.iter().map(|p| p.allowed.to_string()).collect();
                    let (client_ratio, server_ratio) =
                        if index == 0 || subjects[0].name != "bucketproof" {
                            ("".to_owned(), "".to_owned())
                        } else {
                            (
                                format!("{:.2}x", ratio(|p| p.per_second, false)),
                                // Decisions per second of the server: the inverse of its time per call.
                                format!("{:.2}x", ratio(|p| p.server_us, true)),
                            )
                        };
                    println!(
                        "| {mix:?} | {keys_name} | {} | {} | {:.1} | {:.2} | {instructions} | {} of {} | {client_ratio} | {server_ratio} |",
                        mode.name(),
                        subject.name,
                        median(&mut rates) / 1000.0,
                        median(&mut server),
                        allowed.join("/"),
                        calls,
                    );
                }
            }
        }
    }
    delete_prefix(&mut connection, &base);
}
