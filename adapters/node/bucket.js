#!/usr/bin/env node
// The Node.js reference adapter: an exact keyed token bucket that speaks the subject protocol,
// version 1 (docs/subject-protocol.md), on stdin/stdout.
//
// Owns: the bucket rules of docs/semantics.md (acquire, settle of a reserved request, reconfigure,
// forget, sweep, the key bound with its four policies, request-id records, keys of several
// bandwidths: up to 8 per key, one shared cursor, charged all or none), the parsing of request lines and the writing of
// replies. Promises: every number the limiter sees is a BigInt, so nothing rounds or overflows
// (times and keys go up to 2^64 - 1); a balance is a whole number of units of 1/(q * 10^9) token, so a nanosecond of
// refill at p/q tokens per second is exactly p units and every wait is ceil(deficit / p) ns; it
// never reads a clock (the time is each request's now_ns); an error changes nothing; a request it
// cannot read ends the process with exit 2 instead of being guessed at.
// Node.js 20, no dependencies. `--bug NAME` plants one classic mistake (see BUGS).
'use strict';

const U64_MAX = (1n << 64n) - 1n;
const NS_PER_S = 1_000_000_000n;
const MAX_RATE_DENOM = 1n << 32n;
const NEVER = 'never';
// How many entries a new key at the bound may inspect to make room: bounded, so that a table full
// of busy keys cannot turn every request into a full scan.
const ROOM_SCAN = 32;
// Under evict_keeping_deficit: slots of the deficit array per key of the key bound (fewer collisions
// between a flood's victims and an innocent key than with one).
const DEFICIT_SLOTS_PER_KEY = 2;
// The instant at which a bucket with a bandwidth of rate 0 that is not full is full again: after every
// instant of the clock. Only ever compared with BigInts (which JavaScript does exactly), never
// computed with.
const NEVER_FULL = Infinity;
const POLICIES = ['reject_new_keys', 'evict_full', 'evict_least_recent', 'evict_keeping_deficit'];
const MASK64 = U64_MAX;
// The most bandwidths a key's config may have (docs/semantics.md, "Several bandwidths per key").
const MAX_BANDWIDTHS = 8;
// A bandwidth's name: a structured-field key of at most 32 characters.
const NAME = /^[a-z*][a-z0-9_.*-]{0,31}$/;

const BUGS = {
  'strict-greater': 'admit only when tokens > cost (">" where ">=" belongs)',
  'charge-denied': 'a denial still subtracts the cost, down to 0',
  'floor-wait': 'waits rounded down instead of up',
  'no-horizon': 'a dropped key comes back fresh at now, even when the clock ran backwards',
  'charge-covering': 'a denial of a key of several bandwidths charges the bandwidths that covered the cost',
  'refund-twice': 'a settle ignores that its request was settled already, so a retried settle refunds again',
};

// A request the adapter cannot read: the harness made a mistake or speaks another protocol.
class ProtocolError extends Error {}
// An error reply: {"kind": ..., "message": ...}.
class Refusal extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

// ---------------------------------------------------------------------------------------------
// Reading. Integers go up to 2^64 - 1 and JSON.parse rounds those above 2^53; below that it is
// exact, and several times faster than a parser written in JavaScript. So a line whose numbers are
// all short (at most 15 digits, no fraction, no exponent) goes through JSON.parse and validation
// turns its integers into BigInts; any other line goes through the exact parser below, which makes
// every integer a BigInt as it reads it and refuses fractions and exponents (no request field takes
// one). Both give the same answer for every line; the test is only about speed.

const NEEDS_EXACT = /[0-9][.eE]|[0-9]{16}/;

function parseLine(line) {
  if (NEEDS_EXACT.test(line)) return parseExact(line);
  try {
    return JSON.parse(line);
  } catch (error) {
    throw new ProtocolError(error.message);
  }
}

let text = '';
let at = 0;

function fail(what) {
  throw new ProtocolError(`${what} at column ${at + 1}`);
}

function skipSpace() {
  for (;;) {
    const c = text.charCodeAt(at);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return;
    at += 1;
  }
}

function expect(code) {
  skipSpace();
  if (text.charCodeAt(at) !== code) fail(`expected ${JSON.stringify(String.fromCharCode(code))}`);
  at += 1;
}

const isDigit = (c) => c >= 0x30 && c <= 0x39;

function parseString() {
  const start = at;
  at += 1; // the opening quote
  let escaped = false;
  for (;;) {
    const c = text.charCodeAt(at);
    if (Number.isNaN(c) || c < 0x20) fail('unterminated string');
    at += 1;
    if (c === 0x22) break;
    if (c === 0x5c) {
      escaped = true;
      at += 1; // the escaped character; JSON.parse below checks the escape
    }
  }
  return escaped ? JSON.parse(text.slice(start, at)) : text.slice(start + 1, at - 1);
}

function parseNumber() {
  const start = at;
  if (text.charCodeAt(at) === 0x2d) at += 1;
  const first = at;
  while (isDigit(text.charCodeAt(at))) at += 1;
  if (at === first || (text.charCodeAt(first) === 0x30 && at > first + 1)) fail('malformed number');
  const c = text.charCodeAt(at);
  if (c === 0x2e || c === 0x65 || c === 0x45) fail('a number with a fraction or an exponent');
  return BigInt(text.slice(start, at));
}

function parseValue() {
  skipSpace();
  const c = text.charCodeAt(at);
  if (c === 0x7b) { // {
    at += 1;
    const object = {};
    skipSpace();
    if (text.charCodeAt(at) === 0x7d) return (at += 1), object;
    for (;;) {
      skipSpace();
      if (text.charCodeAt(at) !== 0x22) fail('expected a field name');
      const name = parseString();
      if (name === '__proto__') fail('a field named __proto__'); // would set the prototype
      expect(0x3a); // :
      object[name] = parseValue();
      skipSpace();
      if (text.charCodeAt(at) === 0x7d) return (at += 1), object;
      expect(0x2c); // ,
    }
  }
  if (c === 0x5b) { // [
    at += 1;
    const array = [];
    skipSpace();
    if (text.charCodeAt(at) === 0x5d) return (at += 1), array;
    for (;;) {
      array.push(parseValue());
      skipSpace();
      if (text.charCodeAt(at) === 0x5d) return (at += 1), array;
      expect(0x2c);
    }
  }
  if (c === 0x22) return parseString();
  if (c === 0x2d || isDigit(c)) return parseNumber();
  if (text.startsWith('true', at)) return (at += 4), true;
  if (text.startsWith('false', at)) return (at += 5), false;
  if (text.startsWith('null', at)) return (at += 4), null;
  return fail('unexpected character');
}

function parseExact(line) {
  text = line;
  at = 0;
  const result = parseValue();
  skipSpace();
  if (at !== text.length) fail('text after the value');
  return result;
}

// Every request's fields and their types; `?` marks an optional field (absent or null).
const REQUESTS = {
  hello: { protocol: 'versions' },
  setup: {
    config: 'config', max_keys: 'u64', policy: 'string', sweep_per_op: 'u64',
    dedupe_window_ns: 'u64', dedupe_per_key: 'u64',
  },
  acquire: {
    key: 'u64', now_ns: 'u64', cost: 'u64', request_id: '?u64', inspect: '?bool',
    probe_retry: '?bool', retry_slack_ns: '?u64',
  },
  settle: { key: 'u64', now_ns: 'u64', request_id: 'u64', actual: 'u64', inspect: '?bool' },
  reconfigure: { key: 'u64', now_ns: 'u64', config: 'config', inspect: '?bool' },
  forget: { key: 'u64' },
  sweep: { now_ns: 'u64' },
  inspect: { key: 'u64' },
  would_allow: { key: 'u64', now_ns: 'u64', cost: 'u64' },
  reset: {},
};

// Each type's check, which also converts: the value as the limiter takes it, or INVALID.
const INVALID = Symbol('invalid');
const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);

function toU64(v) {
  if (typeof v === 'bigint') return v >= 0n && v <= U64_MAX ? v : INVALID;
  return Number.isSafeInteger(v) && v >= 0 ? BigInt(v) : INVALID;
}

// A bandwidth: `name` only when the harness sent one (a named bandwidth).
function toBandwidth(b) {
  if (!isObject(b)) return INVALID;
  const fields = Object.keys(b).sort().join();
  if (fields !== 'capacity,rate,rate_per_s' && fields !== 'capacity,name,rate,rate_per_s') return INVALID;
  const capacity = toU64(b.capacity);
  const strings = typeof b.rate_per_s === 'string' && typeof b.rate === 'string'
    && (b.name === undefined || typeof b.name === 'string');
  if (capacity === INVALID || !strings) return INVALID;
  const bandwidth = { capacity, rate_per_s: b.rate_per_s, rate: b.rate };
  if (b.name !== undefined) bandwidth.name = b.name;
  return bandwidth;
}

const every = (convert) => (v) => {
  if (!Array.isArray(v) || v.length === 0) return INVALID;
  const out = v.map(convert);
  return out.includes(INVALID) ? INVALID : out;
};

const TYPES = {
  u64: toU64,
  bool: (v) => (typeof v === 'boolean' ? v : INVALID),
  string: (v) => (typeof v === 'string' ? v : INVALID),
  versions: (v) => (Array.isArray(v) && v.every((x) => toU64(x) !== INVALID) ? v.map(toU64) : INVALID),
  config: every(toBandwidth),
};

// The tables above, resolved once: per op, field name -> { type name, convert, optional }.
const SCHEMAS = Object.fromEntries(Object.entries(REQUESTS).map(([op, fields]) => [op,
  new Map(Object.entries(fields).map(([name, type]) => {
    const bare = type.replace('?', '');
    return [name, { bare, convert: TYPES[bare], optional: type !== bare }];
  }))]));

// Parses and type-checks one request line into { id, op, ...fields } (an optional field that is
// absent or null is left out); unknown fields are an error, as the protocol says.
function readRequest(line) {
  const raw = parseLine(line);
  if (!isObject(raw)) throw new ProtocolError('a request is a JSON object');
  const id = toU64(raw.id);
  if (id === INVALID) throw new ProtocolError('"id" must be an integer');
  const schema = typeof raw.op === 'string' ? SCHEMAS[raw.op] : undefined;
  if (schema === undefined) throw new ProtocolError(`unknown op ${JSON.stringify(raw.op)}`);
  const request = { id, op: raw.op };
  for (const name of Object.keys(raw)) {
    if (name === 'id' || name === 'op') continue;
    const field = schema.get(name);
    if (field === undefined) throw new ProtocolError(`${raw.op}: unknown field "${name}"`);
    if (raw[name] === null && field.optional) continue;
    const value = field.convert(raw[name]);
    if (value === INVALID) throw new ProtocolError(`${raw.op}: "${name}" is not a ${field.bare}`);
    request[name] = value;
  }
  for (const [name, field] of schema) {
    if (!field.optional && !(name in request)) {
      throw new ProtocolError(`${raw.op}: missing field "${name}"`);
    }
  }
  return request;
}

// ---------------------------------------------------------------------------------------------
// Configs and amounts.

const gcd = (a, b) => (b === 0n ? a : gcd(b, a % b));
const max = (a, b) => (a > b ? a : b);
const min = (a, b) => (a < b ? a : b);

// A bandwidth: `capacity` whole tokens, refilled at p/q tokens per second (reduced). One unit is
// 1/(q * 10^9) token, so `unit` is the units per token and `capUnits` the capacity in units.
function makeBandwidth({ capacity, rate_per_s: rate, name }) {
  if (name !== undefined && !NAME.test(name)) {
    throw new Refusal('unsupported', `bandwidth name ${JSON.stringify(name)}`);
  }
  const parts = /^([0-9]+)\/([0-9]+)$/.exec(rate);
  if (parts === null) throw new Refusal('unsupported', `rate_per_s ${JSON.stringify(rate)} is not p/q`);
  let [p, q] = [BigInt(parts[1]), BigInt(parts[2])];
  if (q === 0n) throw new Refusal('unsupported', 'a rate denominator of 0');
  const common = gcd(p, q);
  [p, q] = [p / common, q / common];
  if (capacity < 1n) throw new Refusal('unsupported', 'a capacity of 0');
  if (q > MAX_RATE_DENOM) throw new Refusal('unsupported', 'a rate denominator above 2^32');
  const unit = q * NS_PER_S;
  return { capacity, p, q, unit, capUnits: capacity * unit, name: name === undefined ? null : name };
}

// A key's config: `bands`, 1 to 8 bandwidths in the order given; `capacity` the smallest capacity
// (the largest cost it admits); `ids` each bandwidth's identity, its name or `#i` at position i.
function makeConfig(bandwidths) {
  if (bandwidths.length > MAX_BANDWIDTHS) {
    throw new Refusal('unsupported', `${bandwidths.length} bandwidths (at most ${MAX_BANDWIDTHS})`);
  }
  const bands = bandwidths.map(makeBandwidth);
  const ids = bands.map((band, i) => (band.name === null ? `#${i}` : band.name));
  if (new Set(ids).size !== ids.length) throw new Refusal('unsupported', 'two bandwidths of one name');
  const capacity = bands.reduce((least, band) => min(least, band.capacity), bands[0].capacity);
  return { bands, capacity, ids };
}

// An exact amount on the wire: units over units-per-token (unreduced, which the protocol allows).
const amount = (units, band) => `"${units}/${band.unit}"`;
const wait = (w) => (w === null ? 'null' : w === NEVER ? '"never"' : `${w}`);

// The position of the part that answers for the whole decision (its remaining and reset-after):
// for a denial the bandwidth with the largest wait ("never" the largest), for an allow the one with
// the fewest whole tokens left; the first of equals.
function binding(parts, units, bands) {
  let best = 0;
  for (let i = 1; i < parts.length; i += 1) {
    const [w, b] = [parts[i].retryAfter, parts[best].retryAfter];
    const better = w === null
      ? units[i] / bands[i].unit < units[best] / bands[best].unit
      : b !== NEVER && (w === NEVER || w > b);
    if (better) best = i;
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// The limiter.

class Limiter {
  constructor(setup, bug) {
    this.bug = bug;
    this.config = makeConfig(setup.config);
    if (!POLICIES.includes(setup.policy)) {
      throw new Refusal('unsupported', `policy ${JSON.stringify(setup.policy)}`);
    }
    this.policy = setup.policy;
    this.maxKeys = Number(min(setup.max_keys, 1n << 53n));
    this.sweepPerOp = Number(min(setup.sweep_per_op, 1024n));
    this.window = setup.dedupe_window_ns;
    this.perKey = Number(min(setup.dedupe_per_key, 1n << 32n));
    // key (BigInt) -> { units, last, override (a config or null), records [{ id, at, decision,
    // charged (the acquire's cost, null if denied), settled (null, or { actual, decision }) }] }.
    // Map order is the order the amortized sweep and the room scan visit: a visited entry that stays
    // moves to the back, so the scans rotate through the table.
    this.entries = new Map();
    // The latest time at which a bucket was dropped by eviction, judged at max(now, last_refill).
    // A new bucket starts at max(now, horizon), so a key that was dropped and comes back under a
    // clock that ran backwards continues from where it was judged full: no time credited twice, no
    // dead record alive again.
    this.horizon = 0n;
    // Under evict_keeping_deficit: per slot (a hash of the key), the latest instant at which a victim
    // dropped there would be full again (0n: nothing owed). Allocated at the first drop of a victim
    // that owes, when the table already holds maxKeys entries; it never grows.
    this.deficits = null;
  }

  configOf(entry) {
    return (entry && entry.override) || this.config;
  }

  // A bucket for `key`, which holds none, at now or at the eviction horizon if that is later: every
  // bandwidth full, or, when the key's deficit slot owes until f past that cursor, capacity minus
  // (f - cursor) * units per ns (at least 0), and 0 in a bandwidth whose rate is 0.
  fresh(key, config, now) {
    const last = this.bug === 'no-horizon' ? now : max(now, this.horizon);
    const f = this.deficits === null ? 0n : this.deficits[this.slot(key)];
    if (f <= last) return { units: config.bands.map((band) => band.capUnits), last };
    if (f === NEVER_FULL) return { units: config.bands.map(() => 0n), last };
    const ahead = f - last;
    return { units: config.bands.map((band) => (band.p === 0n ? 0n : max(0n, band.capUnits - ahead * band.p))), last };
  }

  // The deficit array's slot of a key: a splitmix64 finalizer of the key, modulo the size.
  slot(key) {
    let x = (key + 0x9E3779B97F4A7C15n) & MASK64;
    x = ((x ^ (x >> 30n)) * 0xBF58476D1CE4E5B9n) & MASK64;
    x = ((x ^ (x >> 27n)) * 0x94D049BB133111EBn) & MASK64;
    return Number((x ^ (x >> 31n)) % BigInt(this.deficits.length));
  }

  // When the victim `entry` (of the default config: a victim is never pinned), refilled to its
  // judgment time j, is full again with no traffic: the latest over its bandwidths of j + ceil(missing
  // units / units per ns); j if it is full; NEVER_FULL if a bandwidth not full has rate 0.
  fullAt(entry, j) {
    const elapsed = j - entry.last;
    let f = j;
    for (const [i, band] of this.config.bands.entries()) {
      const missing = band.capUnits - entry.units[i] - elapsed * band.p;
      if (missing > 0n) {
        if (band.p === 0n) return NEVER_FULL;
        f = max(f, j + (missing + band.p - 1n) / band.p);
      }
    }
    return f;
  }

  // A victim dropped at its judgment time j while not full: its slot keeps the later of the instant
  // it would be full again and what the slot held (a collision only makes a new bucket emptier).
  remember(key, entry, j) {
    const f = this.fullAt(entry, j);
    if (f <= j) return; // full: it owes nothing
    if (this.deficits === null) this.deficits = new Array(DEFICIT_SLOTS_PER_KEY * this.maxKeys).fill(0n);
    const slot = this.slot(key);
    if (f > this.deficits[slot]) this.deficits[slot] = f;
  }

  // Refill every bandwidth to t = max(now, last): units + (t - last) * p, clamped at its capacity.
  // Pure: `units` is a new array, one balance per bandwidth.
  refilled(state, config, now) {
    const t = max(now, state.last);
    const elapsed = t - state.last;
    return { units: config.bands.map((band, i) => min(band.capUnits, state.units[i] + elapsed * band.p)), last: t };
  }

  admits(units, costUnits) {
    return this.bug === 'strict-greater' ? units > costUnits : units >= costUnits;
  }

  // ns from now until `deficit` more units have refilled, from the cursor t: "never" with no
  // refill or when now + wait would pass the end of the clock.
  wait(band, now, t, deficit) {
    if (band.p === 0n) return NEVER;
    const ns = this.bug === 'floor-wait' ? deficit / band.p : (deficit + band.p - 1n) / band.p;
    const w = t - now + ns;
    return now + w > U64_MAX ? NEVER : w;
  }

  isLive(record, at) {
    return at < record.at + this.window;
  }

  // Evictable at s: judged at j = max(s, last), no override, no record live at j, every bandwidth
  // full at j.
  isEvictable(entry, s) {
    const j = max(s, entry.last);
    const config = this.configOf(entry);
    return entry.override === null
      && !entry.records.some((record) => this.isLive(record, j))
      && this.refilled(entry, config, j).units.every((units, i) => units === config.bands[i].capUnits);
  }

  evict(key, entry, now) {
    this.horizon = max(this.horizon, max(now, entry.last));
    this.entries.delete(key);
  }

  // The first `count` entries, and a function that moves the ones still held to the back.
  sample(count) {
    const taken = [];
    for (const pair of this.entries) {
      if (taken.length >= count) break;
      taken.push(pair);
    }
    const rotate = () => {
      for (const [key, entry] of taken) {
        if (this.entries.delete(key)) this.entries.set(key, entry);
      }
    };
    return [taken, rotate];
  }

  // Makes room for one new key at the bound: drops exactly one bucket and returns true, or drops
  // nothing and returns false (so a refused key costs no other key its state). Pinned keys (with an
  // override) are never dropped.
  makeRoom(now) {
    if (this.entries.size < this.maxKeys) return true;
    if (this.policy === 'reject_new_keys' || this.entries.size === 0) return false;
    const [taken, rotate] = this.sample(ROOM_SCAN);
    let oldest = null;
    for (const [key, entry] of taken) {
      if (this.isEvictable(entry, now)) {
        this.evict(key, entry, now);
        return rotate(), true;
      }
      if (entry.override === null && (oldest === null || entry.last < oldest[1].last)) {
        oldest = [key, entry];
      }
    }
    rotate();
    if (this.policy === 'evict_least_recent' && oldest !== null) {
      this.evict(oldest[0], oldest[1], now); // lossy by contract
      return true;
    }
    if (this.policy === 'evict_keeping_deficit' && oldest !== null) {
      // The same victim, but what it owes is kept for the next bucket of its slot.
      this.remember(oldest[0], oldest[1], max(now, oldest[1].last));
      this.evict(oldest[0], oldest[1], now);
      return true;
    }
    return false;
  }

  // Inserts a new key (room was made), then sweeps a few other entries, as the protocol's
  // sweep_per_op hint asks: only evictable ones, so nothing a later decision could miss.
  insert(key, entry, now) {
    const [taken, rotate] = this.sample(this.sweepPerOp);
    for (const [other, held] of taken) {
      if (this.isEvictable(held, now)) this.evict(other, held, now);
    }
    rotate();
    this.entries.set(key, entry);
  }

  // The stored state as the protocol shows it: the first bandwidth's balance and capacity, and the
  // one cursor.
  state(key) {
    const entry = this.entries.get(key);
    if (entry === undefined) return null;
    const first = this.configOf(entry).bands[0];
    return `{"tokens":${amount(entry.units[0], first)},"last_refill_ns":${entry.last},`
      + `"capacity":${first.capacity}}`;
  }

  // acquire, steps 1-6 of docs/semantics.md. Returns { decision, created, replayed }.
  acquire(key, now, cost, requestId) {
    let entry = this.entries.get(key);
    const config = this.configOf(entry);
    if (cost === 0n || cost > config.capacity) {
      throw new Refusal('invalid_cost', `cost ${cost} is not in [1, ${config.capacity}]`);
    }
    if (requestId !== undefined && entry !== undefined) {
      const at = max(now, entry.last);
      for (let i = entry.records.length - 1; i >= 0; i -= 1) {
        const record = entry.records[i];
        if (record.id === requestId && this.isLive(record, at)) {
          return { decision: record.decision, created: false, replayed: true };
        }
      }
    }
    const created = entry === undefined;
    if (created && !this.makeRoom(now)) {
      throw new Refusal('key_limit', `${this.maxKeys} keys held`);
    }
    const { units: refilled, last: t } = this.refilled(entry || this.fresh(key, config, now), config, now);
    const { units, decision } = this.decide(config, now, t, refilled, cost);
    if (created) {
      entry = { units, last: t, override: null, records: [] };
      this.insert(key, entry, now);
    } else {
      entry.units = units;
      entry.last = t;
    }
    if (requestId !== undefined && this.window > 0n && this.perKey > 0) {
      // A new record of an id replaces its older (dead) one, which must not hold a FIFO slot.
      entry.records = entry.records.filter((record) => record.id !== requestId);
      const charged = decision.allowed ? cost : null;
      entry.records.push({ id: requestId, at: t, decision, charged, settled: null });
      while (entry.records.length > this.perKey) entry.records.shift();
    }
    return { decision, created, replayed: false };
  }

  // Steps 4 and 5 of acquire for `cost` on the balances `refilled` at effective time `t`: the
  // balances after the decision (charged all or none) and the decision.
  decide(config, now, t, refilled, cost) {
    const { bands } = config;
    const costUnits = bands.map((band) => cost * band.unit);
    const covers = refilled.map((units, i) => this.admits(units, costUnits[i]));
    const allowed = covers.every(Boolean);
    let units = allowed ? refilled.map((held, i) => held - costUnits[i]) : refilled;
    if (!allowed && this.bug === 'charge-denied') {
      units = refilled.map((held, i) => max(0n, held - costUnits[i]));
    } else if (!allowed && this.bug === 'charge-covering') {
      units = refilled.map((held, i) => (covers[i] ? held - costUnits[i] : held));
    }
    // Each bandwidth's part: a denial's wait is 0 for a bandwidth that covers the cost.
    const parts = bands.map((band, i) => ({
      remaining: amount(units[i], band),
      retryAfter: allowed ? null : covers[i] ? 0n : this.wait(band, now, t, costUnits[i] - refilled[i]),
      resetAfter: units[i] >= band.capUnits ? 0n : this.wait(band, now, t, band.capUnits - units[i]),
    }));
    const decision = { ...parts[binding(parts, units, bands)] };
    decision.allowed = allowed;
    if (parts.length > 1) decision.parts = parts;
    return { units, decision };
  }

  // settle of docs/semantics.md: reconciles the charge of the admitted request `requestId` with
  // `actual`, a refund (capped at capacity, never more than the charge) or an extra decided as an
  // acquire of `actual - charged`. An allowed settlement closes the record where it is (stamp and
  // FIFO place unchanged); a denied extra leaves it open. Errors change nothing.
  // Returns { decision, replayed }.
  settle(key, now, requestId, actual) {
    const entry = this.entries.get(key);
    const config = this.configOf(entry);
    if (actual > config.capacity) {
      throw new Refusal('invalid_cost', `actual ${actual} is above the capacity ${config.capacity}`);
    }
    const at = entry === undefined ? now : max(now, entry.last);
    const record = entry === undefined ? undefined
      : entry.records.find((r) => r.id === requestId && this.isLive(r, at));
    if (record === undefined) {
      throw new Refusal('unknown_request', `key ${key} holds no live record of request ${requestId}`);
    }
    if (record.charged === null) {
      throw new Refusal('not_admitted', `request ${requestId} was denied: it charged nothing`);
    }
    if (record.settled !== null && this.bug !== 'refund-twice') {
      if (record.settled.actual !== actual) {
        throw new Refusal('already_settled',
          `request ${requestId} was settled already with actual ${record.settled.actual}`);
      }
      return { decision: record.settled.decision, replayed: true };
    }
    const { units: refilled, last: t } = this.refilled(entry, config, now);
    const { charged } = record;
    let result;
    if (actual <= charged) {
      const back = charged - actual;
      const refunded = refilled.map((held, i) => min(config.bands[i].capUnits, held + back * config.bands[i].unit));
      result = this.decide(config, now, t, refunded, 0n);
    } else {
      result = this.decide(config, now, t, refilled, actual - charged);
    }
    entry.units = result.units;
    entry.last = t;
    if (result.decision.allowed) record.settled = { actual, decision: result.decision };
    return { decision: result.decision, replayed: false };
  }

  // Whether an acquire of `cost` at `now` would be admitted with no other traffic; records nothing.
  wouldAllow(key, now, cost) {
    const entry = this.entries.get(key);
    const config = this.configOf(entry);
    if (cost === 0n || cost > config.capacity) return false;
    const { units } = this.refilled(entry || this.fresh(key, config, now), config, now);
    return units.every((held, i) => this.admits(held, cost * config.bands[i].unit));
  }

  // Refill under the old config, then each new bandwidth continues the old one of its identity
  // (converted to the new grid rounding down, clamped) or starts full; pins the key.
  reconfigure(key, now, bandwidths) {
    const next = makeConfig(bandwidths);
    let entry = this.entries.get(key);
    const created = entry === undefined;
    if (created && !this.makeRoom(now)) {
      throw new Refusal('key_limit', `${this.maxKeys} keys held`);
    }
    const old = this.configOf(entry);
    const { units, last } = this.refilled(entry || this.fresh(key, old, now), old, now);
    if (created) {
      entry = { units: [], last, override: null, records: [] };
      this.insert(key, entry, now);
    }
    entry.units = next.bands.map((band, i) => {
      const was = old.ids.indexOf(next.ids[i]);
      if (was < 0) return band.capUnits; // no old bandwidth of its identity: full, as a fresh key
      return min(band.capUnits, (units[was] * band.q) / old.bands[was].q);
    });
    entry.last = last;
    entry.override = next;
  }

  forget(key) {
    this.entries.delete(key);
  }

  sweep(now) {
    for (const [key, entry] of [...this.entries]) {
      if (this.isEvictable(entry, now)) this.evict(key, entry, now);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The conversation: one reply (a JSON text) per request.

// One reply (a JSON text) to `request`: `{"id":..,<reply(request)>}`, or, when `reply` throws a
// Refusal, the typed error. An error changes nothing, so asked to inspect it still shows the
// unchanged state: `stateOf()`, a JSON text or null. Every adapter built on this file answers here.
function answer(request, reply, stateOf) {
  const head = `{"id":${request.id}`;
  try {
    return `${head},${reply(request)}}`;
  } catch (error) {
    if (!(error instanceof Refusal)) throw error;
    const state = request.inspect ? stateOf() : null;
    const around = request.inspect ? `,"before":${state},"after":${state}` : '';
    const message = JSON.stringify(error.message);
    return `${head},"error":{"kind":"${error.kind}","message":${message}}${around}}`;
  }
}

// The decision fields of an acquire's or a settle's reply, each followed by a comma.
function decisionText(decision) {
  let text = `"allowed":${decision.allowed},"remaining":${decision.remaining},`
    + `"retry_after_ns":${wait(decision.retryAfter)},"reset_after_ns":${wait(decision.resetAfter)},`;
  if (decision.parts) {
    const parts = decision.parts.map((part) => `{"remaining":${part.remaining},`
      + `"retry_after_ns":${wait(part.retryAfter)},"reset_after_ns":${wait(part.resetAfter)}}`);
    text += `"bandwidths":[${parts.join(',')}],`;
  }
  return text;
}

class Server {
  constructor(bug) {
    this.bug = bug;
    this.limiter = null;
  }

  answer(request) {
    return answer(request, (r) => this.reply(r), () => (this.limiter ? this.limiter.state(request.key) : null));
  }

  reply(request) {
    if (request.op === 'hello') {
      if (!request.protocol.includes(1n)) throw new Refusal('unsupported', 'speaks version 1 only');
      const name = this.bug ? `node-bucket+${this.bug}` : 'node-bucket';
      return `"protocol":1,"name":"${name}","version":"1.0.0","capabilities":{"reconfigure":true,`
        + '"forget":true,"sweep":true,"inspect":true,"would_allow":true,"request_ids":true,'
        + '"evicts":true,"batch":1024,"bandwidths":8,"settle":true},"profile":{"name":"exact"}';
    }
    if (request.op === 'setup') {
      this.limiter = null;
      this.limiter = new Limiter(request, this.bug);
      return '"ok":true';
    }
    if (request.op === 'reset') {
      this.limiter = null;
      return '"ok":true';
    }
    const limiter = this.limiter;
    if (limiter === null) throw new Refusal('unsupported', `${request.op} before setup`);
    const { key, now_ns: now } = request;
    switch (request.op) {
      case 'acquire': {
        const before = request.inspect ? limiter.state(key) : null;
        const { decision, created, replayed } = limiter.acquire(key, now, request.cost, request.request_id);
        let text = `${decisionText(decision)}"created":${created},"replayed":${replayed}`;
        if (request.inspect) text += `,"before":${before},"after":${limiter.state(key)}`;
        const w = decision.retryAfter;
        if (request.probe_retry && !replayed && !decision.allowed && w !== NEVER) {
          // Asked of the state just after this acquire, before any request written behind it.
          const at = limiter.wouldAllow(key, now + w + (request.retry_slack_ns || 0n), request.cost);
          const early = w === 0n ? null : limiter.wouldAllow(key, now + w - 1n, request.cost);
          text += `,"retry":{"at":${at},"before":${early}}`;
        }
        return text;
      }
      case 'settle': {
        const before = request.inspect ? limiter.state(key) : null;
        const { decision, replayed } = limiter.settle(key, now, request.request_id, request.actual);
        let text = `${decisionText(decision)}"replayed":${replayed}`;
        if (request.inspect) text += `,"before":${before},"after":${limiter.state(key)}`;
        return text;
      }
      case 'reconfigure': {
        const before = request.inspect ? limiter.state(key) : null;
        limiter.reconfigure(key, now, request.config);
        return request.inspect ? `"ok":true,"before":${before},"after":${limiter.state(key)}` : '"ok":true';
      }
      case 'forget':
        limiter.forget(key);
        return '"ok":true';
      case 'sweep':
        limiter.sweep(now);
        return '"ok":true';
      case 'inspect':
        return `"state":${limiter.state(key)}`;
      case 'would_allow':
        return `"allowed":${limiter.wouldAllow(key, now, request.cost)}`;
      default:
        throw new ProtocolError(`unknown op ${request.op}`);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Transport: every complete line of a chunk is answered, and the replies go out in one write, so
// a batch of requests costs one pipe round trip. stdout to a pipe is synchronous on Linux.

// Answers `server.answer(request)` for every request line on stdin until it closes; `name` names
// the program in the message of a request it cannot read (exit 2). Exported, with the request
// reader, so that an adapter of another library speaks the same protocol without a copy of it.
function serve(server, name) {
  let pending = '';
  const answerAll = (lines) => {
    const replies = [];
    try {
      for (const line of lines) {
        if (line.trim() !== '') replies.push(server.answer(readRequest(line)));
      }
    } catch (error) {
      if (replies.length > 0) process.stdout.write(`${replies.join('\n')}\n`);
      // A request it cannot read is the harness's mistake (its message says which); anything
      // else is this adapter's, and the stack says where.
      const what = error instanceof ProtocolError
        ? `not a request of protocol 1: ${error.message}`
        : `internal error: ${error.stack || error}`;
      process.stderr.write(`${name}: ${what}\n`);
      process.exit(2);
    }
    if (replies.length > 0) process.stdout.write(`${replies.join('\n')}\n`);
  };
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (chunk) => {
    const lines = (pending + chunk).split('\n');
    pending = lines.pop();
    answerAll(lines);
  });
  // The last line may come without its newline.
  process.stdin.on('end', () => answerAll([pending]));
}

function main(argv) {
  let bug = null;
  if (argv.length === 2 && argv[0] === '--bug') bug = argv[1];
  else if (argv.length === 1 && argv[0].startsWith('--bug=')) bug = argv[0].slice(6);
  else if (argv.length !== 0) {
    process.stderr.write('usage: node bucket.js [--bug NAME]\n');
    process.exit(2);
  }
  if (bug !== null && !(bug in BUGS)) {
    const known = Object.entries(BUGS).map(([name, what]) => `  ${name}: ${what}`).join('\n');
    process.stderr.write(`bucket.js: unknown bug ${JSON.stringify(bug)}; known:\n${known}\n`);
    process.exit(2);
  }
  serve(new Server(bug), 'bucket.js');
}

module.exports = { readRequest, serve, answer, ProtocolError, Refusal };

if (require.main === module) main(process.argv.slice(2));
