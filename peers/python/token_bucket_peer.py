#!/usr/bin/env python3
"""falconry's `token_bucket` (PyPI `token-bucket`, pinned in requirements.txt) as a bucketproof
subject: one `token_bucket.Limiter(rate, capacity, MemoryStorage())` per trace, every protocol key a
bucket key, driven through the subject protocol, version 1, with adapters/python/bucket.py's
transport and request checks (imported, not copied).

The clock. `token_bucket/storage.py` does `import time` and calls `time.monotonic()` (float
seconds) in `MemoryStorage.replenish`; nothing else in the package reads a clock. This adapter
replaces that module's global `time` with an object whose `monotonic()` returns the op's `now_ns`
in seconds (the nearest double to now_ns / 10^9), so the package sees the harness's time and
nothing else; the real `time` module, and every other user of it, is untouched.

The mapping. setup's bandwidth (capacity C, rate p/q tokens per second) becomes
`Limiter(rate=p / q, capacity=C, storage=MemoryStorage())`; a key is `str(key)`; an acquire is
`consume(key, cost)`, and `remaining` is `storage.get_token_count(key)` (public, a float) just
after it. The package reports no wait (retry_after_ns is null), shows no refill cursor and cannot
drop a key, so the capabilities are acquire only. Passed through as the package answers: cost 0
raises ValueError (an `invalid_cost` reply), a cost above capacity is denied. Refused as
`unsupported`: a rate of 0 (the package raises `rate must be > 0`), request ids, a key bound below
the default (it has none).
"""

import json
import os
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "adapters", "python"))

from bucket import bool_text, check_request, error, parse_config, run, u64  # noqa: E402

try:
    import token_bucket
    import token_bucket.storage as token_bucket_storage
except ImportError as e:
    print(f"token_bucket_peer.py: token_bucket is not installed ({e}): run peers/install "
          "(it installs into target/peers/python, which PYTHONPATH must name)", file=sys.stderr)
    sys.exit(2)

NS_PER_S = 1_000_000_000
# The harness's default key bound: a setup asking for less wants a bound this subject lacks.
DEFAULT_MAX_KEYS = 1 << 20


class FakeTime:
    """Stands in for the `time` module inside token_bucket.storage: `monotonic()` is the op's time."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


# The package's own name for its clock, replaced where it looks it up (and checked, so that a
# version that reads its clock another way fails loudly instead of reading the real one).
if getattr(token_bucket_storage, "time", None) is not time:
    print("token_bucket_peer.py: token_bucket.storage no longer reads `time.monotonic()`: "
          "update the fake clock", file=sys.stderr)
    sys.exit(2)
CLOCK = FakeTime()
token_bucket_storage.time = types.SimpleNamespace(monotonic=CLOCK.monotonic)


class Peer:
    def __init__(self):
        self.limiter = None
        self.storage = None
        self.seen = set()

    def acquire(self, rid, obj):
        key, now_ns, cost = u64(obj, "key"), u64(obj, "now_ns"), u64(obj, "cost")
        if obj.get("request_id") is not None:
            return error(rid, "unsupported", "request ids")
        CLOCK.now = now_ns / NS_PER_S  # int / int: the nearest double
        name = str(key)
        try:
            allowed = self.limiter.consume(name, cost)
        except ValueError as e:  # cost 0: "num_tokens must be >= 1", raised before any change
            return error(rid, "invalid_cost", str(e))
        created = name not in self.seen
        self.seen.add(name)
        remaining = json.dumps(float(self.storage.get_token_count(name)))
        return (f'{{"id":{rid},"allowed":{bool_text(allowed)},"remaining":{remaining},'
                f'"retry_after_ns":null,"created":{bool_text(created)},"replayed":false}}')

    def handle(self, obj):
        op, rid, refused = check_request(obj)
        if refused:
            return refused
        if op == "hello":
            return (f'{{"id":{rid},"protocol":1,"name":"pypi:token-bucket",'
                    f'"version":{json.dumps(token_bucket.__version__)},"capabilities":'
                    '{"reconfigure":false,"forget":false,"sweep":false,"inspect":false,'
                    '"would_allow":false,"request_ids":false,"evicts":false,"batch":1024,'
                    '"bandwidths":1},"profile":{"name":"safety","time_resolution":"ns"}}')
        if op == "setup":
            self.limiter = None
            config = parse_config(obj["config"])
            if config is None or config.p == 0:
                return error(rid, "unsupported", "a rate of 0 (the package: rate must be > 0) or an invalid config")
            if u64(obj, "max_keys") < DEFAULT_MAX_KEYS:
                return error(rid, "unsupported", "no key bound")
            q = config.units // NS_PER_S
            self.storage = token_bucket.MemoryStorage()
            self.limiter = token_bucket.Limiter(config.p / q, config.cap, self.storage)
            self.seen = set()
        elif op == "reset":
            self.limiter = self.storage = None
            self.seen = set()
        elif self.limiter is None:
            return error(rid, "unsupported", f"{op} before setup")
        elif op == "acquire":
            return self.acquire(rid, obj)
        else:
            return error(rid, "unsupported", f"{op}: not a capability of this subject")
        return f'{{"id":{rid},"ok":true}}'


def main(argv):
    # No planted bugs: this is someone else's limiter, checked as it ships.
    return run(lambda _bug: Peer(), {}, "token_bucket_peer.py", argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
