#!/usr/bin/env python3
"""The Python reference adapter: an exact keyed token bucket speaking the subject protocol, version 1.

What it owns: one independent implementation of docs/semantics.md (acquire with request-id records,
settle of a reserved request, reconfigure, forget, sweep, the key bound with its four policies, the eviction horizon, and keys of
several bandwidths: up to 8 per key, one shared cursor, charged all or none) and the protocol of
docs/subject-protocol.md over stdin/stdout (batched: it answers everything it has read, then flushes
once).

What it promises:
- Exact: a key's balance is an integer count of units, one unit being 1/(q * 10^9) token for its
  rate p/q, so one nanosecond of refill adds exactly p units. Python integers are unbounded, so
  nothing overflows; the only roundings are the two the semantics prescribe (ceil of waits, floor
  onto the new grid at reconfigure), and a wait that would pass 2^64 - 1 is "never".
- It never reads a clock: every time comes from the request (`now_ns`).
- Drops are lossless except under evict_least_recent: a bucket is dropped (sweep, amortized sweep,
  room at the bound) only when evictable at its judgment time j = max(now, last_refill), and a new
  bucket starts no earlier than the latest such j (the horizon), so a caller's clock that runs
  backwards is never credited the same time twice. Under evict_keeping_deficit a victim that is not
  full leaves behind the instant it would be full again, in a fixed array indexed by a hash of the
  key, and a new bucket of that slot starts no fuller than the victim would be at its cursor.
- Standard library only. `--bug NAME` plants one classic mistake, for proving the gate catches it.
"""

import json
import os
import re
import sys
from math import gcd

U64_MAX = (1 << 64) - 1
NS_PER_S = 1_000_000_000
MAX_RATE_DENOM = 1 << 32
# Entries the room scan at the key bound may look at: bounded, so a table full of non-full buckets
# cannot turn each new key into a full scan.
ROOM_SCAN = 32
# Under evict_keeping_deficit: slots of the deficit array per key of the key bound (fewer collisions
# between a flood's victims and an innocent key than with one).
DEFICIT_SLOTS_PER_KEY = 2
# The instant at which a bucket with a bandwidth of rate 0 that is not full is full again: after every
# instant of the clock. Only ever compared, never computed with, so the arithmetic stays integer.
NEVER_FULL = float("inf")
POLICIES = ("reject_new_keys", "evict_full", "evict_least_recent", "evict_keeping_deficit")
# The most bandwidths a key's config may have (docs/semantics.md, "Several bandwidths per key").
MAX_BANDWIDTHS = 8
# A bandwidth's name: a structured-field key of at most 32 characters.
NAME = re.compile(r"[a-z*][a-z0-9_.*-]{0,31}")

BUGS = {
    "strict-greater": "the allow test is tokens > cost where tokens >= cost belongs",
    "charge-denied": "a denial still subtracts the cost (down to 0)",
    "no-clamp": "refill is not clamped at capacity",
    "retry-floor": "waits are rounded down instead of up",
    "no-horizon": "a dropped key comes back fresh at now, even under a clock that ran backwards",
    "charge-covering": "a denial of a key of several bandwidths charges the bandwidths that covered the cost",
    "refund-twice": "a settle ignores that its request was settled already, so a retried settle refunds again",
    "forget-deficits": "the deficit summary keeps only its size's latest victims (each exactly), so one dropped before that many others comes back full",
}


class ProtocolError(Exception):
    """A request this adapter cannot read: the harness side is broken, so the process exits 2."""


class Config:
    """One bandwidth: capacity in whole tokens, rate p/q tokens per second (reduced), and its name
    (None for an unnamed bandwidth)."""

    __slots__ = ("cap", "p", "units", "cap_units", "name")

    def __init__(self, cap, p, q, name=None):
        self.cap = cap
        self.p = p  # units added per nanosecond
        self.units = q * NS_PER_S  # units per token
        self.cap_units = cap * self.units
        self.name = name


class Bands:
    """A key's config: 1 to 8 bandwidths in the order given (`parts`), `cap` the smallest capacity
    (the largest cost it can admit) and `ids` each bandwidth's identity (its name, else `#i`)."""

    __slots__ = ("parts", "cap", "ids")

    def __init__(self, parts):
        self.parts = tuple(parts)
        self.cap = min(b.cap for b in self.parts)
        self.ids = tuple(b.name if b.name is not None else f"#{i}" for i, b in enumerate(self.parts))

    def full(self):
        return [b.cap_units for b in self.parts]


class Entry:
    """One held key: balance `n` (a list, one count of units per bandwidth of its config), the one
    refill cursor `last`, an override config (None: the default; an override pins the key) and
    request-id records {id: Record}, oldest first."""

    __slots__ = ("key", "n", "last", "cfg", "recs")

    def __init__(self, key, n, last):
        self.key = key
        self.n = n
        self.last = last
        self.cfg = None
        self.recs = None


class Record:
    """One request-id record: its stamp (the acquire's effective time), the acquire's decision fields
    (replayed as they are), what it charged (None for a denial) and, once an allowed settle closed
    it, that settle's `(actual, decision fields)`."""

    __slots__ = ("stamp", "body", "charged", "settled")

    def __init__(self, stamp, body, charged):
        self.stamp = stamp
        self.body = body
        self.charged = charged
        self.settled = None


def u64(obj, name):
    value = obj[name]
    if type(value) is not int or not 0 <= value <= U64_MAX:
        raise ProtocolError(f"{name} is not an integer in [0, 2^64 - 1]: {value!r}")
    return value


def flag(obj, name):
    value = obj.get(name)
    if value is None:
        return False
    if type(value) is not bool:
        raise ProtocolError(f"{name} is not a boolean: {value!r}")
    return value


BANDWIDTH_FIELDS = frozenset(("capacity", "rate_per_s", "rate"))


def parse_bandwidth(band):
    """One bandwidth of a config array, or None if it is not a valid bandwidth."""
    if type(band) is not dict:
        raise ProtocolError(f"a bandwidth is not an object: {band!r}")
    keys = band.keys()
    if not BANDWIDTH_FIELDS <= keys or not keys <= BANDWIDTH_FIELDS | {"name"}:
        raise ProtocolError(f"a bandwidth has fields {sorted(band)}")
    cap, rate, name = u64(band, "capacity"), band["rate_per_s"], band.get("name")
    if name is not None and type(name) is not str:
        raise ProtocolError(f"a bandwidth's name is not a string: {name!r}")
    try:
        p_text, q_text = rate.split("/")
        p, q = int(p_text), int(q_text)
    except (AttributeError, ValueError):
        raise ProtocolError(f"rate_per_s is not \"p/q\": {rate!r}") from None
    if cap < 1 or p < 0 or q < 1 or (name is not None and not NAME.fullmatch(name)):
        return None
    g = gcd(p, q)
    p, q = p // g, q // g
    return Config(cap, p, q, name) if q <= MAX_RATE_DENOM else None


def parse_bandwidths(value):
    """A config array (1 to 8 bandwidths, names distinct) as Bands, or None if it is not a valid
    config."""
    if type(value) is not list or not value:
        raise ProtocolError(f"config is not a non-empty array of bandwidths: {value!r}")
    parts = [parse_bandwidth(band) for band in value]
    if len(parts) > MAX_BANDWIDTHS or None in parts:
        return None
    names = [b.name for b in parts if b.name is not None]
    return Bands(parts) if len(set(names)) == len(names) else None


def parse_config(value):
    """A config of exactly one bandwidth as its Config, or None if it is not a valid one: for a
    limiter that holds one bandwidth per key (millitokens.py)."""
    bands = parse_bandwidths(value)
    return bands.parts[0] if bands is not None and len(bands.parts) == 1 else None


def wait_text(value):
    return '"never"' if value is None else str(value)


class Limiter:
    """The keyed limiter of one trace: the default config, the key bound and its policy, the
    request-id window, and the held keys. Each operation answers with its reply line (a str)."""

    def __init__(self, bug=None):
        self.bug = bug
        self.setup(Bands([Config(1, 0, 1)]), U64_MAX, "reject_new_keys", 0, 0, 0)

    def setup(self, default, max_keys, policy, sweep_per_op, window, per_key):
        self.default = default
        self.max_keys = max_keys
        self.policy = policy
        self.sweep_per_op = sweep_per_op
        self.window = window
        self.per_key = per_key
        self.reset()

    def reset(self):
        self.table = {}
        # Every held entry in insertion order, plus stale ones (dropped or replaced) skipped when
        # met: the amortized sweep and the room scan walk it round-robin from `cursor`.
        self.ring = []
        self.cursor = 0
        # The latest judgment time of any drop: a new bucket starts at max(now, horizon).
        self.horizon = 0
        # Under evict_keeping_deficit: per slot (a hash of the key), the latest instant at which a
        # victim dropped there would be full again (0: nothing owed). Allocated at the first drop of
        # a victim that owes, when the table already holds max_keys entries; it never grows.
        self.deficits = None
        # The forget-deficits bug's summary: (key, full-at instant) of the latest victims.
        self.latest = []

    # --- the bucket arithmetic -------------------------------------------------------------

    def refilled(self, e, bands, at):
        """The balances of `e` (a new list, one per bandwidth) refilled to its effective time
        t = max(at, last), and t."""
        last = e.last
        if at <= last:
            return list(e.n), last
        clamp = self.bug != "no-clamp"
        ns = []
        for n, cfg in zip(e.n, bands.parts):
            n += (at - last) * cfg.p
            if n > cfg.cap_units and clamp:
                n = cfg.cap_units
            ns.append(n)
        return ns, at

    def admits(self, n, cost_units):
        if self.bug == "strict-greater":
            return n > cost_units
        return n >= cost_units

    def wait(self, cfg, now, t, deficit):
        """(t - now) + ceil(deficit / p) ns, or None ("never") with no refill or past 2^64 - 1."""
        if cfg.p == 0:
            return None
        if self.bug == "retry-floor":
            value = t - now + deficit // cfg.p
        else:
            value = t - now + -(-deficit // cfg.p)
        return value if now + value <= U64_MAX else None

    def reset_after(self, cfg, now, t, n):
        return 0 if n >= cfg.cap_units else self.wait(cfg, now, t, cfg.cap_units - n)

    def would_allow(self, key, at, cost):
        e = self.table.get(key)
        bands = self.default if e is None or e.cfg is None else e.cfg
        if cost == 0 or cost > bands.cap:
            return False
        if e is None:
            # A fresh bucket (the key bound is not consulted): full unless its slot owes.
            ns = self.fresh(key, max(at, self.horizon))
        else:
            ns, _ = self.refilled(e, bands, at)
        return all(self.admits(n, cost * cfg.units) for n, cfg in zip(ns, bands.parts))

    def state(self, e):
        """The stored state as the protocol shows it: the first bandwidth's balance and capacity,
        and the one cursor."""
        if e is None:
            return "null"
        first = (self.default if e.cfg is None else e.cfg).parts[0]
        return f'{{"tokens":"{e.n[0]}/{first.units}","last_refill_ns":{e.last},"capacity":{first.cap}}}'

    # --- expiry and the key bound ----------------------------------------------------------

    def evictable(self, e, s):
        """The judgment time j = max(s, last) if `e` is evictable at `s` (full at j, no override, no
        record live at j), else None."""
        if e.cfg is not None:
            return None
        j = s if s > e.last else e.last
        elapsed = j - e.last
        for n, cfg in zip(e.n, self.default.parts):
            if n + elapsed * cfg.p < cfg.cap_units:
                return None  # some bandwidth is not full at j
        if e.recs:
            window = self.window
            for record in e.recs.values():
                if j < record.stamp + window:
                    return None
        return j

    def full_at(self, e, j):
        """The instant at which `e` (of the default config: a victim is never pinned), refilled to its
        judgment time j, is full again with no traffic: the latest over its bandwidths of j + ceil(
        missing units / units per ns), j if it is full, NEVER_FULL if a bandwidth not full has rate 0."""
        elapsed = j - e.last
        f = j
        for n, cfg in zip(e.n, self.default.parts):
            missing = cfg.cap_units - n - elapsed * cfg.p
            if missing > 0:
                if cfg.p == 0:
                    return NEVER_FULL
                f = max(f, j + -(-missing // cfg.p))
        return f

    def slot(self, key):
        """The deficit array's slot of a key: a splitmix64 finalizer of the key, modulo the size."""
        x = (key + 0x9E3779B97F4A7C15) & U64_MAX
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & U64_MAX
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & U64_MAX
        return (x ^ (x >> 31)) % len(self.deficits)

    def remember(self, e, j):
        """A victim `e` dropped at judgment time j while not full: its slot keeps the later of the
        instant it would be full again and what the slot already held (a collision can only make a
        new bucket emptier, never fuller)."""
        f = self.full_at(e, j)
        if f <= j:
            return  # full: it owes nothing
        if self.deficits is None:
            self.deficits = [0] * (DEFICIT_SLOTS_PER_KEY * self.max_keys)
        if self.bug == "forget-deficits":
            kept = [(k, g) for k, g in self.latest if k != e.key]
            self.latest = (kept + [(e.key, f)])[-len(self.deficits):]
            return
        slot = self.slot(e.key)
        if f > self.deficits[slot]:
            self.deficits[slot] = f

    def fresh(self, key, cursor):
        """The balances of a new bucket of `key` at `cursor`: full, or, when its slot owes until
        f > cursor, capacity - (f - cursor) * units per ns (at least 0) in each bandwidth, 0 in one
        whose rate is 0 (nothing was ever paid back)."""
        full = self.default.full()
        if self.deficits is None:
            return full
        if self.bug == "forget-deficits":
            f = dict(self.latest).get(key, 0)
        else:
            f = self.deficits[self.slot(key)]
        if f <= cursor:
            return full
        if f == NEVER_FULL:
            return [0] * len(full)
        ahead = f - cursor
        return [0 if cfg.p == 0 else max(0, cfg.cap_units - ahead * cfg.p) for cfg in self.default.parts]

    def drop(self, e, j):
        del self.table[e.key]
        if j > self.horizon:
            self.horizon = j

    def walk(self, budget, visit):
        """Visits up to `budget` held entries round-robin from the cursor; `visit` returning True
        ends the walk. Steps over a bounded number of slots, stale ones included."""
        table, ring = self.table, self.ring
        if len(ring) > 2 * len(table) + 64:
            ring[:] = table.values()
            self.cursor = 0
        size = len(ring)
        i, seen, steps = self.cursor, 0, 0
        limit = min(size, 4 * budget + 64)
        while steps < limit and seen < budget:
            if i >= size:
                i = 0
            e = ring[i]
            i += 1
            steps += 1
            if table.get(e.key) is not e:
                continue
            seen += 1
            if visit(e):
                break
        self.cursor = i

    def sweep_one(self, now):
        def visit(e):
            j = self.evictable(e, now)
            if j is not None:
                self.drop(e, j)
            return False

        return visit

    def room_for_new_key(self, now):
        """Before a new key is inserted: the amortized sweep, then room at the bound by the
        policy. False (nothing dropped for it) if the key must be refused."""
        if self.sweep_per_op:
            self.walk(self.sweep_per_op, self.sweep_one(now))
        if len(self.table) < self.max_keys:
            return True
        if self.policy == "reject_new_keys" or not self.table:
            return False
        found, oldest = [], []

        def visit(e):
            j = self.evictable(e, now)
            if j is not None:
                found.append((e, j))
                return True
            if e.cfg is None and (not oldest or e.last < oldest[0].last):
                oldest[:] = [e]
            return False

        self.walk(ROOM_SCAN, visit)
        if found:
            self.drop(*found[0])
            return True
        if self.policy == "evict_least_recent" and oldest:
            victim = oldest[0]  # lossy by contract; still raises the horizon to its judgment time
            self.drop(victim, max(now, victim.last))
            return True
        if self.policy == "evict_keeping_deficit" and oldest:
            victim = oldest[0]  # the same victim, but what it owes is kept for its next bucket
            j = max(now, victim.last)
            self.remember(victim, j)
            self.drop(victim, j)
            return True
        return False

    def insert(self, key, now):
        cursor = now if self.bug == "no-horizon" else max(now, self.horizon)
        e = Entry(key, self.fresh(key, cursor), cursor)
        self.table[key] = e
        self.ring.append(e)
        return e

    # --- the operations ----------------------------------------------------------------------

    def decide(self, bands, now, t, ns, cost):
        """Step 4 and 5 for every bandwidth: the balances after the decision (charged all or none)
        and the reply's decision fields (the binding part's, then for several bandwidths every
        part), the whole decision's retry-after (None for "never", and when allowed) and whether it
        is allowed."""
        costs = [cost * cfg.units for cfg in bands.parts]
        covers = [self.admits(n, c) for n, c in zip(ns, costs)]
        allowed = all(covers)
        if allowed:
            ns = [n - c for n, c in zip(ns, costs)]
            waits = None
        else:
            # A bandwidth that covers the cost waits 0; the whole decision waits the longest.
            waits = [0 if ok else self.wait(cfg, now, t, c - n)
                     for cfg, n, c, ok in zip(bands.parts, ns, costs, covers)]
        resets = [self.reset_after(cfg, now, t, n) for cfg, n in zip(bands.parts, ns)]
        if allowed:
            # The bandwidth with the fewest whole tokens left, the first of equals.
            wholes = [n // cfg.units for cfg, n in zip(bands.parts, ns)]
            bind = wholes.index(min(wholes))
            retry = "null"
        elif None in waits:
            bind = waits.index(None)  # "never" is the longest wait
            retry = '"never"'
        else:
            bind = waits.index(max(waits))
            retry = str(waits[bind])
        units = bands.parts[bind].units
        body = (f'"allowed":{bool_text(allowed)},"remaining":"{ns[bind]}/{units}","retry_after_ns":{retry},'
                f'"reset_after_ns":{wait_text(resets[bind])}')
        if len(ns) > 1:
            parts = ",".join(
                f'{{"remaining":"{n}/{cfg.units}","retry_after_ns":{"null" if waits is None else wait_text(w)},'
                f'"reset_after_ns":{wait_text(r)}}}'
                for cfg, n, w, r in zip(bands.parts, ns, waits or ns, resets))
            body += f',"bandwidths":[{parts}]'
        if not allowed:
            if self.bug == "charge-denied":
                ns = [max(0, n - c) for n, c in zip(ns, costs)]
            elif self.bug == "charge-covering":
                ns = [n - c if ok else n for n, c, ok in zip(ns, costs, covers)]
        return ns, body, None if allowed else waits[bind], allowed

    def acquire(self, rid, key, now, cost, request_id, inspect, probe, slack):
        e = self.table.get(key)
        bands = self.default if e is None or e.cfg is None else e.cfg
        if cost == 0 or cost > bands.cap:
            shown = self.state(e) if inspect else None
            return error(rid, "invalid_cost", f"cost {cost} is not in [1, {bands.cap}]", shown)
        if request_id is not None and e is not None and e.recs:
            record = e.recs.get(request_id)
            if record is not None and max(now, e.last) < record.stamp + self.window:
                tail = ""
                if inspect:
                    shown = self.state(e)
                    tail = f',"before":{shown},"after":{shown}'
                return f'{{"id":{rid},{record.body},"created":false,"replayed":true{tail}}}'
        created = e is None
        if created:
            if not self.room_for_new_key(now):
                return error(rid, "key_limit", f"key {key} is new and the bound {self.max_keys} is full",
                             "null" if inspect else None)
            e = self.insert(key, now)
            before = "null"
        else:
            before = self.state(e) if inspect else None
        ns, t = self.refilled(e, bands, now)
        ns, body, retry, allowed = self.decide(bands, now, t, ns, cost)
        e.n, e.last = ns, t
        if request_id is not None and self.window and self.per_key:
            recs = e.recs
            if recs is None:
                recs = e.recs = {}
            elif request_id in recs:
                del recs[request_id]  # the new record replaces the old one, at the newest place
            recs[request_id] = Record(t, body, cost if allowed else None)
            while len(recs) > self.per_key:
                del recs[next(iter(recs))]
        tail = ""
        if inspect:
            tail = f',"before":{before},"after":{self.state(e)}'
        if probe and retry is not None:
            at = min(now + retry + slack, U64_MAX)
            ok_at = self.would_allow(key, at, cost)
            ok_before = "null" if retry == 0 else bool_text(self.would_allow(key, now + retry - 1, cost))
            tail += f',"retry":{{"at":{bool_text(ok_at)},"before":{ok_before}}}'
        return f'{{"id":{rid},{body},"created":{bool_text(created)},"replayed":false{tail}}}'

    def settle(self, rid, key, now, request_id, actual, inspect):
        """Reconciles the charge of the admitted request `request_id` with `actual`: a refund
        (capped at capacity, never more than the charge) or an extra decided as an acquire of
        `actual - charged`. An allowed settlement closes the record in place (its stamp and FIFO
        place stay); a denied extra leaves it open. Errors change nothing."""
        e = self.table.get(key)
        bands = self.default if e is None or e.cfg is None else e.cfg
        shown = self.state(e) if inspect else None
        if actual > bands.cap:
            return error(rid, "invalid_cost", f"actual {actual} is above the capacity {bands.cap}", shown)
        record = None if e is None or not e.recs else e.recs.get(request_id)
        if record is None or max(now, e.last) >= record.stamp + self.window:
            return error(rid, "unknown_request", f"key {key} holds no live record of request {request_id}",
                         shown)
        if record.charged is None:
            return error(rid, "not_admitted", f"request {request_id} was denied: it charged nothing", shown)
        if record.settled is not None and self.bug != "refund-twice":
            settled_actual, settled_body = record.settled
            if settled_actual != actual:
                return error(rid, "already_settled",
                             f"request {request_id} was settled already with actual {settled_actual}", shown)
            tail = "" if shown is None else f',"before":{shown},"after":{shown}'
            return f'{{"id":{rid},{settled_body},"replayed":true{tail}}}'
        ns, t = self.refilled(e, bands, now)
        charged = record.charged
        if actual <= charged:
            back = charged - actual
            ns = [min(cfg.cap_units, n + back * cfg.units) for n, cfg in zip(ns, bands.parts)]
            ns, body, _, allowed = self.decide(bands, now, t, ns, 0)
        else:
            ns, body, _, allowed = self.decide(bands, now, t, ns, actual - charged)
        e.n, e.last = ns, t
        if allowed:
            record.settled = (actual, body)
        tail = "" if shown is None else f',"before":{shown},"after":{self.state(e)}'
        return f'{{"id":{rid},{body},"replayed":false{tail}}}'

    def reconfigure(self, rid, key, now, new, inspect):
        e = self.table.get(key)
        before = self.state(e)
        if new is None:
            return error(rid, "unsupported", "invalid config", before if inspect else None)
        if e is None:
            if not self.room_for_new_key(now):
                return error(rid, "key_limit", f"key {key} is new and the bound {self.max_keys} is full",
                             before if inspect else None)
            e = self.insert(key, now)
        old = self.default if e.cfg is None else e.cfg
        ns, t = self.refilled(e, old, now)
        held = dict(zip(old.ids, zip(ns, old.parts)))
        moved = []
        for identity, cfg in zip(new.ids, new.parts):
            if identity in held:
                n, was = held[identity]
                n = n * cfg.units // was.units  # onto the new grid, rounding down
                moved.append(min(n, cfg.cap_units))
            else:
                moved.append(cfg.cap_units)  # no old bandwidth of its identity: full, as fresh
        e.n, e.last, e.cfg = moved, t, new
        if inspect:
            return f'{{"id":{rid},"ok":true,"before":{before},"after":{self.state(e)}}}'
        return f'{{"id":{rid},"ok":true}}'

    def sweep(self, now):
        for e in list(self.table.values()):
            j = self.evictable(e, now)
            if j is not None:
                self.drop(e, j)

    # --- the protocol ------------------------------------------------------------------------

    def handle(self, obj):
        op, rid, refused = check_request(obj)
        if refused:
            return refused
        if op == "acquire":
            request_id = obj.get("request_id")
            if request_id is not None:
                request_id = u64(obj, "request_id")
            slack = u64(obj, "retry_slack_ns") if obj.get("retry_slack_ns") is not None else 0
            return self.acquire(rid, u64(obj, "key"), u64(obj, "now_ns"), u64(obj, "cost"), request_id,
                                flag(obj, "inspect"), flag(obj, "probe_retry"), slack)
        if op == "settle":
            return self.settle(rid, u64(obj, "key"), u64(obj, "now_ns"), u64(obj, "request_id"),
                               u64(obj, "actual"), flag(obj, "inspect"))
        if op == "would_allow":
            allowed = self.would_allow(u64(obj, "key"), u64(obj, "now_ns"), u64(obj, "cost"))
            return f'{{"id":{rid},"allowed":{bool_text(allowed)}}}'
        if op == "inspect":
            return f'{{"id":{rid},"state":{self.state(self.table.get(u64(obj, "key")))}}}'
        if op == "reconfigure":
            return self.reconfigure(rid, u64(obj, "key"), u64(obj, "now_ns"),
                                    parse_bandwidths(obj["config"]), flag(obj, "inspect"))
        if op == "forget":
            self.table.pop(u64(obj, "key"), None)
        elif op == "sweep":
            self.sweep(u64(obj, "now_ns"))
        elif op == "reset":
            self.reset()
        elif op == "setup":
            default = parse_bandwidths(obj["config"])
            policy = obj["policy"]
            if policy not in POLICIES:
                return error(rid, "unsupported", f"policy {policy!r}")
            if default is None:
                return error(rid, "unsupported", "invalid config")
            self.setup(default, u64(obj, "max_keys"), policy, u64(obj, "sweep_per_op"),
                       u64(obj, "dedupe_window_ns"), u64(obj, "dedupe_per_key"))
        elif op == "hello":
            name = "py-bucket" if self.bug is None else f"py-bucket+{self.bug}"
            return (f'{{"id":{rid},"protocol":1,"name":"{name}","version":"1.0","capabilities":'
                    '{"reconfigure":true,"forget":true,"sweep":true,"inspect":true,"would_allow":true,'
                    '"request_ids":true,"evicts":true,"batch":1024,"bandwidths":8,"settle":true},'
                    '"profile":{"name":"exact"}}')
        return f'{{"id":{rid},"ok":true}}'


def bool_text(value):
    return "true" if value else "false"


def error(rid, kind, message, shown=None):
    """An error reply; `shown` (the key's state, unchanged by the error) adds `before` and `after`."""
    text = json.dumps({"kind": kind, "message": message}, separators=(",", ":"))
    tail = "" if shown is None else f',"before":{shown},"after":{shown}'
    return f'{{"id":{rid},"error":{text}{tail}}}'


def _shape(required, optional=()):
    required = frozenset(("id", "op") + required)
    return required, required | frozenset(optional)


SHAPES = {
    "hello": _shape(("protocol",)),
    "setup": _shape(("config", "max_keys", "policy", "sweep_per_op", "dedupe_window_ns", "dedupe_per_key")),
    "acquire": _shape(("key", "now_ns", "cost"), ("request_id", "inspect", "probe_retry", "retry_slack_ns")),
    "settle": _shape(("key", "now_ns", "request_id", "actual"), ("inspect",)),
    "reconfigure": _shape(("key", "now_ns", "config"), ("inspect",)),
    "forget": _shape(("key",)),
    "sweep": _shape(("now_ns",)),
    "inspect": _shape(("key",)),
    "would_allow": _shape(("key", "now_ns", "cost")),
    "reset": _shape(()),
}


def check_request(obj):
    """One request held to its op's shape: `(op, id, refusal)`, where `refusal` is the reply to send
    instead of handling it (an unknown op, a protocol version other than 1) or None. A request that
    is not an object, or has a missing or unknown field, raises ProtocolError: the conversation is
    broken. Every adapter's `handle` starts here."""
    if type(obj) is not dict:
        raise ProtocolError("a request is not a JSON object")
    op, rid = obj.get("op"), u64(obj, "id")
    shape = SHAPES.get(op)
    if shape is None:
        return op, rid, error(rid, "unsupported", f"unknown op {op!r}")
    required, allowed = shape
    keys = obj.keys()
    if not required <= keys or not keys <= allowed:
        raise ProtocolError(f"{op} has fields {sorted(keys)}; required {sorted(required)}, "
                            f"allowed {sorted(allowed)}")
    if op == "hello" and 1 not in obj["protocol"]:
        return op, rid, error(rid, "unsupported", "this adapter speaks protocol version 1 only")
    return op, rid, None


def decode(lines):
    """The requests of a batch: one json.loads for all of them, else line by line (to name the bad one)."""
    try:
        batch = json.loads(b"[" + b",".join(lines) + b"]")
        if len(batch) == len(lines):
            return batch
    except ValueError:
        pass
    requests = []
    for line in lines:
        try:
            requests.append(json.loads(line))
        except ValueError as e:
            raise ProtocolError(f"not JSON ({e}): {line[:200]!r}") from None
    return requests


def serve(limiter, stdin_fd=0, stdout=None):
    """Reads whatever input is available, answers every complete line, flushes once, repeats until EOF."""
    stdout = stdout or sys.stdout.buffer
    pending = b""
    while True:
        chunk = os.read(stdin_fd, 1 << 16)
        if not chunk:
            if not pending.strip():
                return
            chunk = b"\n"  # end of input: answer a last line that lacks its newline
        pending += chunk
        if b"\n" not in chunk:
            continue
        lines = pending.split(b"\n")
        pending = lines.pop()
        lines = [line for line in lines if line.strip()]
        if not lines:
            continue
        handle = limiter.handle
        replies = [handle(request) for request in decode(lines)]
        stdout.write(("\n".join(replies) + "\n").encode())
        stdout.flush()


def run(make, bugs, program, argv):
    """The command line of an adapter: `[--bug NAME]`, then `serve(make(bug))` until stdin ends.

    Exit codes: 0 at the end of input (or a closed stdout), 2 on a usage or protocol error, with the
    reason on stderr (the harness shows a child's last stderr lines)."""
    args = argv[1:]
    bug = args[1] if len(args) == 2 and args[0] == "--bug" else None
    if args and bug not in bugs:
        known = ", ".join(f"{name} ({what})" for name, what in bugs.items())
        print(f"{program}: usage: {program} [--bug NAME]; bugs: {known}", file=sys.stderr)
        return 2
    try:
        serve(make(bug))
    except ProtocolError as e:
        print(f"{program}: protocol error: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        print(f"{program}: protocol error: missing field {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return 0


def main(argv):
    return run(Limiter, BUGS, "bucket.py", argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
