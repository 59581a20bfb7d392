#!/usr/bin/env python3
"""A limiter that is safe but not exact: an integer millitoken bucket on a millisecond clock, the
kind many services write by hand. Checked under the `safety` profile.

What it owns: a keyed bucket whose balance is a whole number of millitokens and whose clock is the
harness's time truncated to milliseconds. Refill over `e` ms adds `floor(e * p / q)` millitokens for
a rate of p/q tokens per second, and the remainder is lost (so it admits a little less than the
spec, never more). It speaks the subject protocol through `bucket.py`'s transport (`serve`) and
its request checks, and declares what it is: profile `safety`, time resolution `ms`.

What it promises, and what the gate checks of it: never more than capacity plus rate times the
interval (plus the refill of one clock step the ms clock can add), a reported balance in
[0, capacity], a denial that charges nothing, and a retry-after after which the same request
succeeds. It does not promise the exact model's balances: under the `exact` profile it would fail at
the first refill, which is why it declares `safety`. It has no key bound and no request ids: it
refuses setups with a key bound below the default, and acquires with request ids are `unsupported`.
`--bug NAME` plants an overselling mistake the safety profile must catch.
"""

import sys

from bucket import bool_text, check_request, error, flag, parse_config, run, u64

NS_PER_MS = 1_000_000
U64_MAX = (1 << 64) - 1
# The harness's default key bound; a setup asking for less wants a bound this limiter does not have.
DEFAULT_MAX_KEYS = 1 << 20

BUGS = {
    "ceil-refill": "refill rounds the millitokens up instead of down",
    "no-clamp": "refill is not clamped at capacity",
}


class MilliTokens:
    """Every key's `[millitokens, last_ms]`; the config of every key is the setup's."""

    def __init__(self, bug=None):
        self.bug = bug
        self.keys = {}
        self.cap = self.p = self.q = None

    def refilled(self, key, now_ms):
        """The key's balance and cursor refilled to `max(now_ms, last_ms)` (fresh: full at now_ms)."""
        milli, last = self.keys.get(key, (self.cap * 1000, now_ms))
        t = max(now_ms, last)
        gained = (t - last) * self.p
        gained = -(-gained // self.q) if self.bug == "ceil-refill" else gained // self.q
        milli = milli + gained
        if self.bug != "no-clamp":
            milli = min(self.cap * 1000, milli)
        return milli, t

    def state(self, key):
        if key not in self.keys:
            return "null"
        milli, last = self.keys[key]
        return (f'{{"tokens":"{milli}/1000","last_refill_ns":{last * NS_PER_MS},'
                f'"capacity":{self.cap}}}')

    def would_allow(self, key, now_ns, cost):
        return 0 < cost <= self.cap and self.refilled(key, now_ns // NS_PER_MS)[0] >= cost * 1000

    def retry_after(self, now_ns, t_ms, deficit):
        """ns from `now_ns` until `deficit` millitokens have been refilled on the ms clock."""
        if self.p == 0:
            return None
        wait_ms = -(-deficit * self.q // self.p)
        at = (t_ms + wait_ms) * NS_PER_MS
        return at - now_ns if at <= U64_MAX else None

    def acquire(self, rid, obj):
        key, now_ns, cost = u64(obj, "key"), u64(obj, "now_ns"), u64(obj, "cost")
        inspect, probe = flag(obj, "inspect"), flag(obj, "probe_retry")
        before = self.state(key) if inspect else None
        if obj.get("request_id") is not None:
            return error(rid, "unsupported", "request ids", before)
        if not 0 < cost <= self.cap:
            return error(rid, "invalid_cost", f"cost {cost} is not in [1, {self.cap}]", before)
        created = key not in self.keys
        milli, t = self.refilled(key, now_ns // NS_PER_MS)
        allowed = milli >= cost * 1000
        if allowed:
            milli -= cost * 1000
        self.keys[key] = [milli, t]
        wait = None if allowed else self.retry_after(now_ns, t, cost * 1000 - milli)
        retry = "null" if allowed else ('"never"' if wait is None else str(wait))
        reply = (f'{{"id":{rid},"allowed":{bool_text(allowed)},"remaining":"{milli}/1000",'
                 f'"retry_after_ns":{retry},"created":{bool_text(created)},"replayed":false')
        if inspect:
            reply += f',"before":{before},"after":{self.state(key)}'
        if probe and not allowed and wait is not None:
            at = now_ns + wait + (u64(obj, "retry_slack_ns") if obj.get("retry_slack_ns") else 0)
            early = "null" if wait == 0 else bool_text(self.would_allow(key, now_ns + wait - 1, cost))
            reply += f',"retry":{{"at":{bool_text(self.would_allow(key, at, cost))},"before":{early}}}'
        return reply + "}"

    def handle(self, obj):
        op, rid, refused = check_request(obj)
        if refused:
            return refused
        if op == "hello":
            name = "py-millitokens" if self.bug is None else f"py-millitokens+{self.bug}"
            return (f'{{"id":{rid},"protocol":1,"name":"{name}","version":"1.0","capabilities":'
                    '{"reconfigure":false,"forget":true,"sweep":false,"inspect":true,'
                    '"would_allow":true,"request_ids":false,"evicts":false,"batch":1024,'
                    '"bandwidths":1},"profile":{"name":"safety","time_resolution":"ms"}}')
        if op == "setup":
            config = parse_config(obj["config"])
            if config is None or u64(obj, "max_keys") < DEFAULT_MAX_KEYS:
                return error(rid, "unsupported", "no key bound below the default, valid configs only")
            self.keys, self.cap, self.p, self.q = {}, config.cap, config.p, config.units // 1_000_000_000
        elif op == "acquire":
            return self.acquire(rid, obj)
        elif op == "would_allow":
            allowed = self.would_allow(u64(obj, "key"), u64(obj, "now_ns"), u64(obj, "cost"))
            return f'{{"id":{rid},"allowed":{bool_text(allowed)}}}'
        elif op == "inspect":
            return f'{{"id":{rid},"state":{self.state(u64(obj, "key"))}}}'
        elif op == "forget":
            self.keys.pop(u64(obj, "key"), None)
        elif op == "reset":
            self.keys = {}
        else:
            return error(rid, "unsupported", op)
        return f'{{"id":{rid},"ok":true}}'


def main(argv):
    return run(MilliTokens, BUGS, "millitokens.py", argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
