#!/usr/bin/env node
// The npm package `limiter` (jhurliman/node-rate-limiter, pinned in package.json) as a bucketproof
// subject: one of its `TokenBucket`s per key, driven through the subject protocol, version 1
// (docs/subject-protocol.md), with the protocol code of adapters/node/bucket.js (required, not
// copied).
//
// The clock. `TokenBucket` reads the time through its own `clock.js`: `getMilliseconds()`, which
// calls the global `performance.now()` (a float of milliseconds), scales it to seconds and back,
// and floors it to whole milliseconds. Nothing else in the package reads a clock (no `Date.now`,
// no `process.hrtime`). This adapter replaces `performance.now` with a function that returns the
// op's `now_ns` in milliseconds (the nearest double), before the package is loaded, so every
// reading the package makes, including its own ms conversion, sees the harness's time and nothing
// else. The constructor reads the clock too (`lastDrip`), so a key's bucket is built after the
// clock is set to the op's time.
//
// The mapping. setup's bandwidth (capacity C, rate p/q tokens per second, reduced) becomes
// `new TokenBucket({ bucketSize: C, tokensPerInterval: p, interval: 1000 * q })` (interval in ms,
// the unit the package documents). Refused as `unsupported`: a rate of 0 (the package takes
// `tokensPerInterval: 0` to mean "refill to bucketSize on every drip", not "no refill"), numbers
// above 2^53 (the package computes in doubles), and a key bound below the default (it has none).
// An acquire is `tryRemoveTokens(cost)`; `remaining` and `inspect` show the bucket's public fields
// `content` (a float) and `lastDrip` (ms, shown as ns). The package reports no wait, so
// retry_after_ns is null. Its behaviour is passed through as it is: a new bucket starts empty
// (`content = 0`), cost 0 is admitted, a cost above bucketSize is denied.
'use strict';

const fs = require('fs');
const path = require('path');

// The harness's time of the op being answered, as performance.now() returns it (ms, a double).
let fakeMs = 0;
performance.now = () => fakeMs;

let TokenBucket;
let packageVersion;
try {
  ({ TokenBucket } = require('limiter'));
  const entry = require.resolve('limiter'); // .../limiter/dist/cjs/index.js
  const manifest = path.join(path.dirname(entry), '..', '..', 'package.json');
  packageVersion = JSON.parse(fs.readFileSync(manifest, 'utf8')).version;
} catch (error) {
  process.stderr.write(`limiter.js: the npm package "limiter" is not installed: run peers/install (${error.message})\n`);
  process.exit(2);
}

const { serve, answer, Refusal } = require(path.join(__dirname, '..', '..', 'adapters', 'node', 'bucket.js'));

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
// The harness's default key bound: a setup asking for less wants a bound this subject lacks.
const DEFAULT_MAX_KEYS = 1n << 20n;

const gcd = (a, b) => (b === 0n ? a : gcd(b, a % b));

// ns (a BigInt) as milliseconds, the nearest double.
const toMs = (ns) => Number(ns / 1_000_000n) + Number(ns % 1_000_000n) / 1e6;

class Peer {
  constructor() {
    this.options = null; // the TokenBucket options of every key, from setup
    this.buckets = new Map(); // key (BigInt) -> TokenBucket
  }

  setup(request) {
    if (request.config.length !== 1) throw new Refusal('unsupported', 'one bandwidth per key');
    const { capacity, rate_per_s: rate } = request.config[0];
    const parts = /^([0-9]+)\/([0-9]+)$/.exec(rate);
    if (parts === null) throw new Refusal('unsupported', `rate_per_s ${JSON.stringify(rate)}`);
    let [p, q] = [BigInt(parts[1]), BigInt(parts[2])];
    if (p === 0n) {
      throw new Refusal('unsupported', 'a rate of 0: tokensPerInterval 0 refills to bucketSize on every drip');
    }
    const common = gcd(p, q);
    [p, q] = [p / common, q / common];
    if (capacity < 1n || capacity > MAX_SAFE || p > MAX_SAFE || 1000n * q > MAX_SAFE) {
      throw new Refusal('unsupported', 'capacity or rate not exact in a double');
    }
    if (request.max_keys < DEFAULT_MAX_KEYS) throw new Refusal('unsupported', 'no key bound');
    this.options = { bucketSize: Number(capacity), tokensPerInterval: Number(p), interval: Number(1000n * q) };
    this.buckets = new Map();
  }

  state(key) {
    const bucket = this.buckets.get(key);
    if (bucket === undefined) return 'null';
    if (!Number.isInteger(bucket.lastDrip) || bucket.lastDrip < 0 || !Number.isFinite(bucket.content)) {
      throw new Error(`unexpected bucket fields: content ${bucket.content}, lastDrip ${bucket.lastDrip}`);
    }
    const last = BigInt(bucket.lastDrip) * 1_000_000n;
    return `{"tokens":${JSON.stringify(bucket.content)},"last_refill_ns":${last},"capacity":${bucket.bucketSize}}`;
  }

  acquire(request) {
    const { key, now_ns: now, cost } = request;
    const before = request.inspect ? this.state(key) : null;
    if (request.request_id !== undefined) throw new Refusal('unsupported', 'request ids');
    fakeMs = toMs(now);
    let bucket = this.buckets.get(key);
    const created = bucket === undefined;
    if (created) {
      bucket = new TokenBucket(this.options);
      this.buckets.set(key, bucket);
    }
    // A cost above 2^53 rounds here, and is above any bucketSize this adapter builds either way.
    const allowed = bucket.tryRemoveTokens(Number(cost));
    let text = `"allowed":${allowed},"remaining":${JSON.stringify(bucket.content)},"retry_after_ns":null,`
      + `"created":${created},"replayed":false`;
    if (request.inspect) text += `,"before":${before},"after":${this.state(key)}`;
    return text;
  }

  reply(request) {
    switch (request.op) {
      case 'hello':
        if (!request.protocol.includes(1n)) throw new Refusal('unsupported', 'speaks version 1 only');
        return `"protocol":1,"name":"npm:limiter","version":${JSON.stringify(packageVersion)},`
          + '"capabilities":{"reconfigure":false,"forget":true,"sweep":false,"inspect":true,'
          + '"would_allow":false,"request_ids":false,"evicts":false,"batch":1024,"bandwidths":1},'
          + '"profile":{"name":"safety","starts":"empty","time_resolution":"ms"}';
      case 'setup':
        this.options = null;
        this.setup(request);
        return '"ok":true';
      case 'reset':
        this.options = null;
        this.buckets = new Map();
        return '"ok":true';
      default:
        break;
    }
    if (this.options === null) throw new Refusal('unsupported', `${request.op} before setup`);
    switch (request.op) {
      case 'acquire':
        return this.acquire(request);
      case 'inspect':
        return `"state":${this.state(request.key)}`;
      case 'forget':
        this.buckets.delete(request.key);
        return '"ok":true';
      default:
        throw new Refusal('unsupported', `${request.op}: not a capability of this subject`);
    }
  }

  answer(request) {
    return answer(request, (r) => this.reply(r), () => (this.options !== null ? this.state(request.key) : null));
  }
}

serve(new Peer(), 'limiter.js');
