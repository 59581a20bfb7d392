#!/usr/bin/env python3
"""A self-test of bucket.py without the harness: random traces through the adapter's process, each
reply compared with docs/semantics.md written out again here in `fractions.Fraction`s (no key bound,
no sweeps: those are the harness's to judge). It owns nothing the gate relies on; it promises only
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
CONFIGS = [(3, 2, 5), (1, 1, 3), (10, 5, 1), (4, 0, 1), (2, 7, 1000), ((1 << 64) - 1, 1, 1)]


def band(cap, p, q):
    return [{"capacity": cap, "rate_per_s": f"{p}/{q}", "rate": f"{p}/{q}s"}]


class Model:
    """The semantics, literally: tokens a Fraction, rate in tokens per ns."""

    def __init__(self, cfg, window, per_key):
        self.cfg, self.window, self.per_key, self.keys = cfg, window, per_key, {}

    def config(self, key):
        held = self.keys.get(key)
        return held["cfg"] if held and held["cfg"] else self.cfg

    def acquire(self, key, now, cost, rid):
        cap, p, q = self.config(key)
        if cost == 0 or cost > cap:
            return "invalid_cost"
        held = self.keys.get(key)
        if rid is not None and held:
            at = max(now, held["last"])
            for r, stamp, decision in reversed(held["recs"]):
                if r == rid and at < stamp + self.window:
                    return dict(decision, replayed=True, created=False)
        created = held is None
        if created:
            held = self.keys[key] = {"tokens": Fraction(cap), "last": now, "cfg": None, "recs": []}
        rate = Fraction(p, q * 10**9)
        t = max(now, held["last"])
        tokens = min(Fraction(cap), held["tokens"] + (t - held["last"]) * rate)

        def wait(whole):
            if p == 0:
                return "never"
            value = (t - now) + ceil((whole - tokens) / rate)
            return value if now + value <= U64_MAX else "never"

        allowed = tokens >= cost
        retry = None
        if allowed:
            tokens -= cost
        else:
            retry = wait(cost)
        reset = 0 if tokens >= cap else wait(cap)
        held["tokens"], held["last"] = tokens, t
        decision = {"allowed": allowed, "remaining": tokens, "retry_after_ns": retry, "reset_after_ns": reset}
        if rid is not None and self.window:
            held["recs"] = [r for r in held["recs"] if r[0] != rid] + [(rid, t, decision)]
            held["recs"] = held["recs"][max(0, len(held["recs"]) - self.per_key):]
        return dict(decision, replayed=False, created=created)

    def reconfigure(self, key, now, new):
        cap, p, q = self.config(key)
        held = self.keys.setdefault(key, {"tokens": Fraction(cap), "last": now, "cfg": None, "recs": []})
        t = max(now, held["last"])
        tokens = min(Fraction(cap), held["tokens"] + (t - held["last"]) * Fraction(p, q * 10**9))
        units = new[2] * 10**9
        held["tokens"] = min(Fraction(new[0]), Fraction(int(tokens * units), units))
        held["last"], held["cfg"] = t, new


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
                {"op": "setup", "config": band(*cfg), "max_keys": 1 << 20, "policy": "evict_full",
                 "sweep_per_op": 0, "dedupe_window_ns": window, "dedupe_per_key": per_key}]
    expected = [None, None]
    now = rng.choice([0, 10**10, U64_MAX - 10**10])
    for _ in range(steps):
        now = min(U64_MAX, max(0, now + rng.choice([0, 1, 10**6, 10**8, 10**9, 3 * 10**9, -2 * 10**9])))
        key = rng.randrange(3)
        roll = rng.random()
        if roll < 0.05:
            new = rng.choice(CONFIGS)
            requests.append({"op": "reconfigure", "key": key, "now_ns": now, "config": band(*new)})
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
