#!/usr/bin/env python3
"""A self-test of bucket.py without the harness: random traces through the adapter's process, each
reply compared with docs/semantics.md written out again here in `fractions.Fraction`s (no key bound,
no sweeps: those are the harness's to judge), with configs of one bandwidth and of several (named
and unnamed, reconfigured into one another). It owns nothing the gate relies on; it promises only
that a difference is printed with the request that caused it and makes the exit code 1.

    python3 adapters/python/selftest.py [--bug NAME] [--seeds N]
"""

import json
import random
import subprocess
import sys
from fractions import Fraction
from math import ceil
from pathlib import Path

U64_MAX = (1 << 64) - 1
# A config is a list of bandwidths (capacity, p, q, name or None): rate p/q tokens per second.
CONFIGS = [[(3, 2, 5, None)], [(1, 1, 3, None)], [(10, 5, 1, None)], [(4, 0, 1, None)], [(2, 7, 1000, None)],
           [((1 << 64) - 1, 1, 1, None)],
           [(4, 4, 1, None), (20, 2, 1, None), (30, 1, 10, None)],
           [(10, 5, 1, "burst"), (30, 1, 2, "minute")],
           [(3, 2, 5, "minute")],
           [(2, 0, 1, None), (50, 1, 72, None)],
           [(8, 4, 1, "burst"), (3, 1, 1, None), (40, 1, 1, "minute")]]


def band(config):
    out = []
    for cap, p, q, name in config:
        wire = {"capacity": cap, "rate_per_s": f"{p}/{q}", "rate": f"{p}/{q}s"}
        if name is not None:
            wire["name"] = name
        out.append(wire)
    return out


def identities(config):
    return [name if name is not None else f"#{i}" for i, (_, _, _, name) in enumerate(config)]


class Model:
    """The semantics, literally: tokens a Fraction per bandwidth, rate in tokens per ns, one cursor."""

    def __init__(self, cfg, window, per_key):
        self.cfg, self.window, self.per_key, self.keys = cfg, window, per_key, {}

    def config(self, key):
        held = self.keys.get(key)
        return held["cfg"] if held and held["cfg"] else self.cfg

    def fresh(self, config, now):
        return {"tokens": [Fraction(cap) for cap, _, _, _ in config], "last": now, "cfg": None, "recs": []}

    @staticmethod
    def refill(config, held, t):
        return [min(Fraction(cap), tokens + (t - held["last"]) * Fraction(p, q * 10**9))
                for (cap, p, q, _), tokens in zip(config, held["tokens"])]

    def acquire(self, key, now, cost, rid):
        config = self.config(key)
        if cost == 0 or cost > min(cap for cap, _, _, _ in config):
            return "invalid_cost"
        held = self.keys.get(key)
        if rid is not None and held:
            at = max(now, held["last"])
            for r, stamp, decision in reversed(held["recs"]):
                if r == rid and at < stamp + self.window:
                    return dict(decision, replayed=True, created=False)
        created = held is None
        if created:
            held = self.keys[key] = self.fresh(config, now)
        t = max(now, held["last"])
        balances = self.refill(config, held, t)

        def wait(tokens, whole, p, q):
            if tokens >= whole:
                return 0
            if p == 0:
                return "never"
            value = (t - now) + ceil((whole - tokens) / Fraction(p, q * 10**9))
            return value if now + value <= U64_MAX else "never"

        allowed = all(tokens >= cost for tokens in balances)
        if allowed:
            balances = [tokens - cost for tokens in balances]
        parts = []
        for (cap, p, q, _), tokens in zip(config, balances):
            retry = None if allowed else wait(tokens, cost, p, q)
            parts.append({"remaining": tokens, "retry_after_ns": retry, "reset_after_ns": wait(tokens, cap, p, q)})
        if allowed:
            bind = min(range(len(parts)), key=lambda i: (int(parts[i]["remaining"]), i))
        else:
            order = [(float("inf") if part["retry_after_ns"] == "never" else part["retry_after_ns"], -i)
                     for i, part in enumerate(parts)]
            bind = -max(order)[1]
        held["tokens"], held["last"] = balances, t
        decision = dict(parts[bind], allowed=allowed)
        if len(parts) > 1:
            decision["bandwidths"] = parts
        if rid is not None and self.window:
            held["recs"] = [r for r in held["recs"] if r[0] != rid] + [(rid, t, decision)]
            held["recs"] = held["recs"][max(0, len(held["recs"]) - self.per_key):]
        return dict(decision, replayed=False, created=created)

    def reconfigure(self, key, now, new):
        old = self.config(key)
        held = self.keys.setdefault(key, self.fresh(old, now))
        t = max(now, held["last"])
        was = dict(zip(identities(old), self.refill(old, held, t)))
        tokens = []
        for identity, (cap, _, q, _) in zip(identities(new), new):
            if identity in was:
                units = q * 10**9  # onto the new grid, rounding down, then clamped
                tokens.append(min(Fraction(cap), Fraction(int(was[identity] * units), units)))
            else:
                tokens.append(Fraction(cap))  # a new identity starts full
        held["tokens"], held["last"], held["cfg"] = tokens, t, new


def amount(text):
    a, b = text.split("/")
    return Fraction(int(a), int(b))


def run(seed, bug, steps=400):
    rng = random.Random(seed)
    cfg = rng.choice(CONFIGS)
    window, per_key = rng.choice([(0, 0), (2 * 10**9, 2), (10**12, 4)])
    model = Model(cfg, window, per_key)
    command = [sys.executable, str(Path(__file__).with_name("bucket.py"))] + (["--bug", bug] if bug else [])
    requests = [{"op": "hello", "protocol": [1]},
                {"op": "setup", "config": band(cfg), "max_keys": 1 << 20, "policy": "evict_full",
                 "sweep_per_op": 0, "dedupe_window_ns": window, "dedupe_per_key": per_key}]
    expected = [None, None]
    now = rng.choice([0, 10**10, U64_MAX - 10**10])
    for _ in range(steps):
        now = min(U64_MAX, max(0, now + rng.choice([0, 1, 10**6, 10**8, 10**9, 3 * 10**9, -2 * 10**9])))
        key = rng.randrange(3)
        roll = rng.random()
        if roll < 0.05:
            new = rng.choice(CONFIGS)
            requests.append({"op": "reconfigure", "key": key, "now_ns": now, "config": band(new)})
            model.reconfigure(key, now, new)
            expected.append(None)
        elif roll < 0.08:
            requests.append({"op": "forget", "key": key})
            model.keys.pop(key, None)
            expected.append(None)
        else:
            cost = rng.choice([0, 1, 1, 1, 2, 3, 11])
            rid = rng.choice([None, None, rng.randrange(1, 6)])
            request = {"op": "acquire", "key": key, "now_ns": now, "cost": cost}
            if rid is not None:
                request["request_id"] = rid
            requests.append(request)
            expected.append(model.acquire(key, now, cost, rid))
    lines = "".join(json.dumps(dict(r, id=i)) + "\n" for i, r in enumerate(requests))
    out = subprocess.run(command, input=lines, capture_output=True, text=True, check=True).stdout
    for request, want, line in zip(requests, expected, out.splitlines()):
        got = json.loads(line)
        if want is None:
            continue
        if want == "invalid_cost":
            same = got.get("error", {}).get("kind") == "invalid_cost"
        else:
            got_cmp = dict(got)
            got_cmp.pop("id")
            got_cmp["remaining"] = amount(got_cmp["remaining"])
            for part in got_cmp.get("bandwidths", ()):
                part["remaining"] = amount(part["remaining"])
            same = got_cmp == want
        if not same:
            print(f"seed {seed}: {json.dumps(request)}\n  expected {want}\n  got      {line}")
            return False
    return True


def main(argv):
    bug = argv[argv.index("--bug") + 1] if "--bug" in argv else None
    seeds = int(argv[argv.index("--seeds") + 1]) if "--seeds" in argv else 50
    failed = next((seed for seed in range(seeds) if not run(seed, bug)), None)
    print("selftest:", "ok" if failed is None else f"FAILED at seed {failed}", f"({seeds} seeds)")
    return 0 if failed is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
