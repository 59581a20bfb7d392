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
-- The stored bucket is one string (KEYS[1]), read with one GET and written with one SET .. PX, packed
-- with Lua's `struct` as little-endian doubles (exact: every stored number is an integer <= 2^53), so no
-- number is ever printed or parsed as decimal text:
--   bytes  1-48  b (balance in units), s, n (the cursor's limbs), k (the key's transition counter),
--                xs, xn (the expiry of its newest request-id record; xs = -1: none)
--   bytes 49-72  the config the bucket is on: units per token, capacity in units, p (units per ns);
--                for a key without an override, equal to ARGV[2]'s three numbers or refused (never read on
--                another unit grid)
--   bytes 73-80  present only on a key with a per-key override (RedisLimiter::reconfigure): its version;
--                bytes 49-72 are then the override's config, and the key never expires (the override
--                lives until forget, as in the in-memory limiter)
-- Request-id records and their FIFO live in a hash of their own (KEYS[3]), read only by a call that
-- carries a request id.
--
-- KEYS[1]  the user's bucket (one per user; KEYS[2] and KEYS[3] share its hash tag, so one Cluster slot)
-- KEYS[2]  the epoch marker of KEYS[1]'s slot (prelude.lua, state loss)
-- KEYS[3]  the user's request-id records: 'r<id>' -> record, 'q<slot>' -> id, 'qh', 'qt', 'qc' (named
--          only by a call with a request id)
-- ARGV[1]  's' = the server's TIME, 'i' = injected time (below); then 'c' or 't', the recovery policy
--          after a state loss (prelude.lua)
-- ARGV[2]  the default config, packed as bytes 49-72 above
-- ARGV[3]  cost in whole tokens (checked here against the key's effective capacity: 0 or above -> BPCOST)
-- then, with injected time only: now, whole seconds; now, nanoseconds within the second; the TTL floor in
--          ms (the lag the injected clock may fall behind Redis's before an expiry could lose anything)
-- then, with a request id only: the id; the dedupe window, seconds; nanoseconds within the second;
--          request-id records kept per key (0 = do not record)
--
-- Reply: {code, balance, t_s, t_n, seq, ...}; code = allowed + 2 * created + 8 * replayed
--          + 16 * (now_s, now_n follow) + 32 * (cost in units follows) + 64 * (override follows)
--   created: 0 existing, 1 fresh, 2 recovering, 3 recovering and the loss detected by this call.
--   t: the refill cursor max(now, last); now follows when it differs from t (else now = t).
--   seq: this key's transition counter, so a test can put concurrent decisions in their real order.
--   cost: follows only for a replay (the recorded request's); otherwise the caller's, on the decision's
--   config. override: version, capacity in tokens, p, q of the config the decision was made under.
--   The caller rebuilds the exact Decision (waits included) from these with the core's transition.

-- `key`, the instant's locals `now_s`, `now_n`, `refill` and `helpers()` (the rest: exact division,
-- formatting, instants, the clock, recovery) come from prelude.lua, which the Rust side puts in front of
-- this script. The common path (an existing key, no request id) makes no other function: each costs
-- Redis about a microsecond of instructions per call.

local conf = ARGV[2]
local cost_tokens = tonumber(ARGV[3])
local ttl_floor = 0
local j = 4
if string.byte(ARGV[1], 1) == 105 then -- 'i'
  now_s = tonumber(ARGV[4])
  now_n = tonumber(ARGV[5])
  ttl_floor = tonumber(ARGV[6])
  j = 7
else
  -- As prelude.lua's server_time, without making the helpers.
  local tm = redis.call('TIME')
  now_s = tonumber(tm[1])
  now_n = tonumber(tm[2]) * 1000
end
local rid = ARGV[j]

-- A key of another layout (a key of several bandwidths is a hash) fails this GET with WRONGTYPE, which
-- the client reports as a stored config mismatch.
local v = redis.call('GET', key)

-- The key's effective config: its override if reconfigured, else the default.
local unit, cap, p = struct.unpack('<ddd', conf)
local ov = 0
local b, ls, ln, seq, xs, xn
if v then
  local n = #v
  if n == 80 then
    b, ls, ln, seq, xs, xn, unit, cap, p, ov = struct.unpack('<dddddddddd', v)
  elseif n == 72 then
    local su, sc, sp
    b, ls, ln, seq, xs, xn, su, sc, sp = struct.unpack('<ddddddddd', v)
    if su ~= unit or sc ~= cap or sp ~= p then
      return redis.error_reply('BPCONFIG the stored bucket is on another config')
    end
  else
    return redis.error_reply('BPCONFIG the stored key is not a one-bandwidth bucket')
  end
end
local cap_tokens = cap / unit

-- Step 1: an invalid cost is an error and changes nothing (no replay either).
if cost_tokens < 1 or cost_tokens > cap_tokens then
  return redis.error_reply('BPCOST ' .. string.format('%.0f', cap_tokens))
end
local cost = cost_tokens * unit

-- Step 2: a live record for this request id answers with the recorded decision; nothing changes.
-- Record: slot,exp_s,exp_n,allowed,b,t_s,t_n,seq,now_s,now_n,cost,o_version,o_capacity,o_p,o_q, then its
-- settlement once settled (settle.lua), which a replay of the acquire does not send.
-- exp = t + window, t the effective time of the acquire that made it; live while this call's effective
-- time max(now, stored cursor) is before exp. The key's time never moves back, so a rollback of the
-- caller's clock is not special and a record dead once stays dead.
if rid and v then
  local rec = redis.call('HGET', KEYS[3], 'r' .. rid)
  if rec then
    local _, _, _, before = helpers()
    local f = {}
    for x in string.gmatch(rec, '[^,]+') do f[#f + 1] = tonumber(x) end
    local es, en = now_s, now_n
    if before(es, en, ls, ln) then es, en = ls, ln end
    if before(es, en, f[2], f[3]) then
      local reply = {f[4] + 8 + 16 + 32, f[5], f[6], f[7], f[8], f[9], f[10], f[11]}
      if f[12] > 0 then
        reply[1] = reply[1] + 64
        for i = 12, 15 do reply[#reply + 1] = f[i] end
      end
      return reply
    end
  end
end

-- Step 3: refill to t = max(now, last). A missing key is a fresh bucket: full, at now.
local created = 0
if not v then
  -- created: 1 fresh; 2 fresh within one refill period of a detected loss (flagged); 3 as 2, and this call
  -- detected the loss (prelude.lua, recovery_start).
  local _, _, _, _, _, _, recovering, recovery_start, recovery_policy = helpers()
  created = 1
  b = cap; ls = now_s; ln = now_n; seq = 0; xs = -1; xn = 0
  local rs, rn, detected = recovery_start()
  if recovering(cap, p, rs, rn) then
    created = 2
    if recovery_policy() == 'c' then b = 0; ls = rs; ln = rn end
  end
  if detected then created = 3 end
end
local ts, tn = now_s, now_n
if now_s < ls or (now_s == ls and now_n < ln) then ts, tn = ls, ln end
b = refill(b, cap, p, ls, ln, ts, tn)

-- Step 4: decide.
local allowed = 0
if b >= cost then
  allowed = 1
  b = b - cost
end
seq = seq + 1

-- Step 6: record the decision under the request id (prelude.lua's store_record: a FIFO of at most
-- `keep` records per key).
local ocap, oq = 0, 0
if ov > 0 then ocap = cap_tokens; oq = unit / E9 end
if rid then
  local win_s, win_n, keep = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  if keep > 0 and (win_s > 0 or win_n > 0) then
    local _, _, fmt, before, ms_until, _, _, _, _, store_record = helpers()
    -- Stamped with the effective time t (ts, tn), not the caller's now.
    local ex_s, ex_n = ts + win_s, tn + win_n
    if ex_n >= E9 then ex_s = ex_s + 1; ex_n = ex_n - E9 end
    store_record(KEYS[3], rid, keep, table.concat({fmt(ex_s), fmt(ex_n), allowed, fmt(b), fmt(ts),
      fmt(tn), fmt(seq), fmt(now_s), fmt(now_n), fmt(cost), fmt(ov), fmt(ocap), fmt(p), fmt(oq)}, ','))
    if xs < 0 or before(xs, xn, ex_s, ex_n) then xs, xn = ex_s, ex_n end
    -- The records are needed until the newest dies (with an injected clock, plus the floor).
    local rttl = ms_until(now_s, now_n, xs, xn) + ttl_floor
    if rttl < 1 then rttl = 1 end
    redis.call('PEXPIRE', KEYS[3], rttl)
  end
end

-- TTL: until the bucket is full as seen from now (lag included), and never before the newest live
-- request-id record dies; with an injected clock, plus the floor. A bucket that can never refill
-- (p = 0, not full) must not expire, and neither may a key holding an override.
-- In ms: lag + ceil((cap - b) / p), rounded up, never 0 (prelude.lua's floordiv and ceildiv, written
-- out here so that the common path makes no function: each double quotient is within one of the
-- truth, and exact products correct it).
-- Why plus the floor, not at least: Redis expires the key by its own clock. A key dropped once it is
-- full with no live record loses nothing only if the caller's next `now` is at least that late in the
-- key's time; with server time it is (one clock), with an injected clock it is as long as the injected
-- clock has fallen at most `ttl_floor` behind Redis's since this write. A later call that finds the key
-- gone cannot know its old cursor (the string was the one place it lived), so the floor is the whole of
-- the margin.
if ov > 0 then
  redis.call('SET', key, struct.pack('<dddddddddd', b, ts, tn, seq, xs, xn, unit, cap, p, ov))
elseif p > 0 or b >= cap then
  local reset = 0
  if b < cap then
    local m = cap - b
    reset = math.floor(m / p)
    if reset * p > m then reset = reset - 1 end
    if (reset + 1) * p <= m then reset = reset + 1 end
    if reset * p < m then reset = reset + 1 end
  end
  local lag_s, lag_n = ts - now_s, tn - now_n
  if lag_n < 0 then lag_s = lag_s - 1; lag_n = lag_n + E9 end
  local x = lag_n + reset
  local ms = math.floor(x / 1000000)
  if ms * 1000000 > x then ms = ms - 1 end
  if (ms + 1) * 1000000 <= x then ms = ms + 1 end
  if ms * 1000000 < x then ms = ms + 1 end
  local ttl = lag_s * 1000 + ms
  if ttl < 1 then ttl = 1 end
  if xs >= 0 then
    local _, _, _, _, ms_until = helpers()
    local rttl = ms_until(now_s, now_n, xs, xn)
    if rttl > ttl then ttl = rttl end
  end
  redis.call('SET', key, struct.pack('<ddddddddd', b, ts, tn, seq, xs, xn, unit, cap, p), 'PX',
    ttl + ttl_floor)
else
  redis.call('SET', key, struct.pack('<ddddddddd', b, ts, tn, seq, xs, xn, unit, cap, p))
end

local reply = {allowed + 2 * created, b, ts, tn, seq}
if ts ~= now_s or tn ~= now_n then
  reply[1] = reply[1] + 16
  reply[6] = now_s
  reply[7] = now_n
end
if ov > 0 then
  reply[1] = reply[1] + 64
  reply[#reply + 1] = ov
  reply[#reply + 1] = ocap
  reply[#reply + 1] = p
  reply[#reply + 1] = oq
end
return reply
