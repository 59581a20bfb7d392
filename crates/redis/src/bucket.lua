-- bucketproof: the exact token-bucket transition (docs/semantics.md, acquire steps 2-6) as one atomic
-- Redis script. Read, replay check, refill, decide, write, request-id record and TTL all happen here, so
-- concurrent instances can never interleave inside one transition.
--
-- Numbers: Redis Lua numbers are IEEE doubles, exact for integers up to 2^53. The Rust side admits only
-- configs with capacity_units + max(p, 3e9) <= 2^53 (see src/range.rs); under that bound every value this
-- script computes is an integer <= 2^53, so every +, -, * and comparison below is exact. Divisions go
-- through floordiv/ceildiv, which correct the rounded quotient with exact products.
--
-- Time: a u64 nanosecond instant does not fit a double, so instants travel as two limbs
-- (seconds, nanoseconds < 1e9). Elapsed time is only ever turned into one number after it has been capped
-- near the time-to-full, which is <= capacity_units.
--
-- KEYS[1]  the user's hash (one key per user, so one slot in Redis Cluster)
-- KEYS[2]  the epoch marker of KEYS[1]'s slot (prelude.lua, state loss)
-- ARGV[1]  's' = use the server's TIME, 'i' = injected time in ARGV[2..3]; then 'c' or 't', the
--          recovery policy after a state loss (prelude.lua)
-- ARGV[2]  now, whole seconds           ARGV[3]  now, nanoseconds within the second
-- ARGV[4]  default config fingerprint (units per token / capacity units / p); a stored bucket without an
--          override must carry the same one, or it is refused (never read on another unit grid)
-- ARGV[5]  default capacity in units    ARGV[6]  default p: units added per nanosecond
-- ARGV[7]  cost in whole tokens (checked here against the key's effective capacity: 0 or above -> BPCOST)
-- ARGV[8]  request id, '' for none
-- ARGV[9]  dedupe window, seconds       ARGV[10] dedupe window, nanoseconds within the second
-- ARGV[11] request-id records kept per key (0 = do not record)
-- ARGV[12] TTL floor in ms (0 with server time; with injected time, whose clock is not the server's, the
--          lag the injected clock may fall behind Redis's before an expiry could lose anything)
-- ARGV[13] default units per token (q * 1e9)    ARGV[14] default capacity in whole tokens
--
-- A per-key override (set by RedisLimiter::reconfigure, atomically, with WATCH/MULTI) is the hash field
-- 'o' = "version:capacity:p:q"; it replaces the default config for this key, and such a key never
-- expires (the override must live until forget, as in the in-memory limiter).
--
-- Reply: {replayed, created (0 existing, 1 fresh, 2 recovering, 3 recovering and loss detected), allowed, balance, reset, retry, t_s, t_n, now_s, now_n, seq, cost,
--         o_version, o_capacity, o_p, o_q}   (o_version 0: the default config decided)
--   reset / retry: ceil(missing units / p) in ns, measured from t; 0 = nothing missing; -1 = never (p = 0).
--   t: the refill cursor max(now, last); the caller adds the lag t - now exactly in u128.
--   seq: this key's transition counter, so a test can put concurrent decisions in their real order.
--   cost: the cost in units the decision was made for (a replay's is the recorded request's).

-- The helpers (floordiv, ceildiv, fmt, before, ms_until), `key` and the instant `now_s`, `now_n` come
-- from prelude.lua, which the Rust side puts in front of this script.

local fp = ARGV[4]
local cap = tonumber(ARGV[5])
local p = tonumber(ARGV[6])
local cost_tokens = tonumber(ARGV[7])
local unit = tonumber(ARGV[13])
local cap_tokens = tonumber(ARGV[14])
local rid = ARGV[8]
local win_s = tonumber(ARGV[9])
local win_n = tonumber(ARGV[10])
local keep = tonumber(ARGV[11])
local ttl_floor = tonumber(ARGV[12])
local recording = rid ~= '' and keep > 0 and (win_s > 0 or win_n > 0)

local h = redis.call('HMGET', key, 'b', 's', 'n', 'g', 'k', 'xs', 'xn', 'o')

-- The key's effective config: its override if reconfigured, else the default.
local ov, oc, on, oq = 0, 0, 0, 0
if h[8] then
  local a, c, d, e = string.match(h[8], '^(%d+):(%d+):(%d+):(%d+)$')
  ov, oc, on, oq = tonumber(a), tonumber(c), tonumber(d), tonumber(e)
  unit = oq * E9
  cap_tokens = oc
  cap = oc * unit
  p = on
  fp = h[4]
end

-- Step 1: an invalid cost is an error and changes nothing (no replay either).
if cost_tokens < 1 or cost_tokens > cap_tokens then
  return redis.error_reply('BPCOST ' .. fmt(cap_tokens))
end
local cost = cost_tokens * unit

-- Step 2: a live record for this request id answers with the recorded decision; nothing changes.
-- Record: slot,exp_s,exp_n,allowed,balance,reset,retry,t_s,t_n,now_s,now_n,seq,cost,ov,oc,on,oq
-- exp = t + window, t the effective time of the acquire that made it; live while this call's effective
-- time max(now, stored cursor) is before exp. The key's time never moves back, so a rollback of the
-- caller's clock is not special and a record dead once stays dead.
if rid ~= '' and h[1] then
  local rec = redis.call('HGET', key, 'r' .. rid)
  if rec then
    local f = {}
    for x in string.gmatch(rec, '[^,]+') do f[#f + 1] = tonumber(x) end
    local es, en = now_s, now_n
    local cs, cn = tonumber(h[2]), tonumber(h[3])
    if before(es, en, cs, cn) then es, en = cs, cn end
    if before(es, en, f[2], f[3]) then
      return {1, 0, f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12], f[13], f[14], f[15],
        f[16], f[17]}
    end
  end
end

if h[4] and h[4] ~= fp then
  return redis.error_reply('BPCONFIG stored config ' .. h[4] .. ' differs from ' .. fp)
end

-- Step 3: refill to t = max(now, last). A missing hash is a fresh bucket: full, at now.
local created, b, ls, ln
if h[1] then
  created = 0
  b = tonumber(h[1]); ls = tonumber(h[2]); ln = tonumber(h[3])
else
  -- created: 1 fresh; 2 fresh within one refill period of a detected loss (flagged); 3 as 2, and this call
  -- detected the loss (prelude.lua, recovery_start).
  created = 1
  b = cap; ls = now_s; ln = now_n
  local rs, rn, detected = recovery_start()
  if recovering(cap, p, rs, rn) then
    created = 2
    if recovery == 'c' then b = 0; ls = rs; ln = rn end
  end
  if detected then created = 3 end
end
local ts, tn = now_s, now_n
if before(now_s, now_n, ls, ln) then ts, tn = ls, ln end
b = refill(b, cap, p, ls, ln, ts, tn)

-- Step 4: decide. Step 5: what the caller needs for remaining, reset_after and retry_after.
local allowed = 0
if b >= cost then
  allowed = 1
  b = b - cost
end
local reset = 0
if b < cap then
  if p == 0 then reset = -1 else reset = ceildiv(cap - b, p) end
end
local retry = 0
if allowed == 0 then
  if p == 0 then retry = -1 else retry = ceildiv(cost - b, p) end
end
local seq = (tonumber(h[5]) or 0) + 1

if created > 0 then
  redis.call('HSET', key, 'b', b, 's', ts, 'n', tn, 'k', seq, 'g', fp)
else
  redis.call('HSET', key, 'b', b, 's', ts, 'n', tn, 'k', seq)
end

-- Step 6: record the decision under the request id; FIFO of at most `keep` records per key. A new
-- record of an id replaces its older (dead) one, slot included, so a dead record never holds a slot
-- that could push out another id's live record (docs/semantics.md, step 6).
local xs, xn = tonumber(h[6]), tonumber(h[7])
if recording then
  -- Stamped with the effective time t (ts, tn), not the caller's now.
  local ex_s, ex_n = ts + win_s, tn + win_n
  if ex_n >= E9 then ex_s = ex_s + 1; ex_n = ex_n - E9 end
  local q = redis.call('HMGET', key, 'qh', 'qt', 'qc')
  local qh, qt, qc = tonumber(q[1]) or 0, tonumber(q[2]) or 0, tonumber(q[3]) or 0
  local old = redis.call('HGET', key, 'r' .. rid)
  if old then
    redis.call('HDEL', key, 'q' .. string.match(old, '^[^,]+'))
    qc = qc - 1
  end
  local rec = table.concat({fmt(qt), fmt(ex_s), fmt(ex_n), allowed, fmt(b), fmt(reset), fmt(retry),
    fmt(ts), fmt(tn), fmt(now_s), fmt(now_n), fmt(seq), fmt(cost), fmt(ov), fmt(oc), fmt(on), fmt(oq)},
    ',')
  redis.call('HSET', key, 'r' .. rid, rec, 'q' .. fmt(qt), rid)
  qt = qt + 1
  qc = qc + 1
  while qc > keep and qh < qt do
    local victim = redis.call('HGET', key, 'q' .. fmt(qh))
    if victim then
      -- The id's record is dropped only if it is this slot's: a newer record of the same id (made after
      -- this one went stale) keeps its own, later slot.
      local vrec = redis.call('HGET', key, 'r' .. victim)
      if vrec and tonumber(string.match(vrec, '^[^,]+')) == qh then
        redis.call('HDEL', key, 'r' .. victim)
      end
      redis.call('HDEL', key, 'q' .. fmt(qh))
      qc = qc - 1
    end
    qh = qh + 1
  end
  if not xs or before(xs, xn, ex_s, ex_n) then xs, xn = ex_s, ex_n end
  redis.call('HSET', key, 'qh', qh, 'qt', qt, 'qc', qc, 'xs', xs, 'xn', xn)
end

-- TTL: until the bucket is full as seen from now (lag included), and never before the newest live
-- request-id record dies; with an injected clock, plus the floor. Never 0. A bucket that can never
-- refill (p = 0, not full) must not expire, and neither may a key holding an override.
-- Why plus, not at least: Redis expires the key by its own clock. A key dropped once it is full with
-- no live record loses nothing only if the caller's next `now` is at least that late in the key's
-- time; with server time it is (one clock), with an injected clock it is as long as the injected
-- clock has fallen at most `ttl_floor` behind Redis's since this write. A later call that finds the
-- key gone cannot know its old cursor (the hash was the one place it lived), so the floor is the
-- whole of the margin.
local ttl = -1
if reset >= 0 and ov == 0 then
  local lag_s, lag_n = ts - now_s, tn - now_n
  if lag_n < 0 then lag_s = lag_s - 1; lag_n = lag_n + E9 end
  ttl = lag_s * 1000 + ceildiv(lag_n + reset, 1000000)
  if xs then
    local rttl = ms_until(now_s, now_n, xs, xn)
    if rttl > ttl then ttl = rttl end
  end
  ttl = ttl + ttl_floor
  if ttl < 1 then ttl = 1 end
  redis.call('PEXPIRE', key, fmt(ttl))
else
  redis.call('PERSIST', key)
end

return {0, created, allowed, b, reset, retry, ts, tn, now_s, now_n, seq, cost, ov, oc, on, oq}
