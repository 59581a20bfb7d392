-- bucketproof: the transition of a key with several bandwidths (docs/semantics.md, "Several bandwidths per
-- key") as one atomic Redis script on one hash. A key of one bandwidth never comes here: it runs bucket.lua,
-- unchanged. This script is bucket.lua's steps with a loop over the bandwidths; read bucket.lua's header
-- for the number rules (every bandwidth is in the exact range on its own: each value computed for
-- bandwidth i is an integer <= capacity_units_i + max(p_i, 3e9) <= 2^53) and for the time limbs.
--
-- KEYS[1]  the user's hash: every bandwidth of the key in one hash, so one slot in Redis Cluster
-- KEYS[2]  the epoch marker of KEYS[1]'s slot (prelude.lua, state loss)
-- ARGV[1]  's' = use the server's TIME, 'i' = injected time in ARGV[2..3]; then the recovery policy
--          'c' or 't' (prelude.lua)
-- ARGV[2]  now, whole seconds           ARGV[3]  now, nanoseconds within the second
-- ARGV[4]  the set's fingerprint (every bandwidth's units per token / capacity units / p, ';'-joined);
--          a stored key must carry the same one, or it is refused
-- ARGV[5]  cost in whole tokens (the client refuses 0 and costs above the smallest capacity before
--          calling; checked again here against ARGV[11])
-- ARGV[6]  request id, '' for none
-- ARGV[7]  dedupe window, seconds       ARGV[8]  dedupe window, nanoseconds within the second
-- ARGV[9]  request-id records kept per key (0 = do not record)
-- ARGV[10] TTL floor in ms (as bucket.lua's ARGV[12])
-- ARGV[11] the smallest capacity in whole tokens: the largest valid cost
-- ARGV[12] n, the number of bandwidths (2..8)
-- ARGV[13 + 3(i-1) .. 15 + 3(i-1)]  bandwidth i (1..n): capacity in units, p (units per ns), units per token
--
-- The key is a hash (a key of one bandwidth is bucket.lua's packed string). Stored fields: 's', 'n' the one cursor shared by every bandwidth; 'b1' .. 'bn' each bandwidth's balance in
-- units of its own grid; 'g' the fingerprint; 'k' the transition counter; request-id records and their FIFO
-- as in bucket.lua ('r<id>', 'q<slot>', 'qh', 'qt', 'qc', 'xs', 'xn'). No override field: a key of several
-- bandwidths is not reconfigured per key (RedisLimiter::reconfigure refuses it); a hash that holds one ('o')
-- was written by a one-bandwidth limiter and is refused.
--
-- Reply: {replayed, created (as bucket.lua: 0 existing, 1 fresh, 2 recovering, 3 and loss detected),
--         allowed, t_s, t_n, now_s, now_n, seq, cost, n,
--         balance_1, reset_1, retry_1, ..., balance_n, reset_n, retry_n}
--   cost: in whole tokens (a replay's is the recorded request's).
--   reset_i: ceil(missing_i / p_i) ns from t; 0 = full; -1 = never (p_i = 0).
--   retry_i: denied only (0 when allowed): 0 if bandwidth i covers the cost, else ceil(short_i / p_i) ns
--            from t, -1 = never. The whole decision's wait is the largest (the client's Decisions).

-- `key`, the instant's locals `now_s`, `now_n`, `refill` and `helpers()` (the rest: exact division,
-- formatting, instants, recovery) come from prelude.lua, which the Rust side puts in front of this
-- script.

local floordiv, ceildiv, fmt, before, ms_until, server_time, recovering, recovery_start,
  recovery_policy, store_record, key_ttl = helpers()
if string.sub(ARGV[1], 1, 1) == 's' then
  now_s, now_n = server_time()
else
  now_s = tonumber(ARGV[2])
  now_n = tonumber(ARGV[3])
end
local fp = ARGV[4]
local cost_tokens = tonumber(ARGV[5])
local rid = ARGV[6]
local win_s = tonumber(ARGV[7])
local win_n = tonumber(ARGV[8])
local keep = tonumber(ARGV[9])
local ttl_floor = tonumber(ARGV[10])
local bound = tonumber(ARGV[11])
local nb = tonumber(ARGV[12])
local recording = rid ~= '' and keep > 0 and (win_s > 0 or win_n > 0)

local caps, ps, units, fields = {}, {}, {}, {}
for i = 1, nb do
  caps[i] = tonumber(ARGV[10 + 3 * i])
  ps[i] = tonumber(ARGV[11 + 3 * i])
  units[i] = tonumber(ARGV[12 + 3 * i])
  fields[i] = 'b' .. i
end

-- Step 1: an invalid cost is an error and changes nothing (no replay either).
if cost_tokens < 1 or cost_tokens > bound then
  return redis.error_reply('BPCOST ' .. fmt(bound))
end

-- A key of one bandwidth is a string (bucket.lua): refused, as any other stored config.
local h = redis.pcall('HMGET', key, 's', 'n', 'g', 'k', 'xs', 'xn', 'o', unpack(fields))
if h.err then
  return redis.error_reply('BPCONFIG the stored key is not a key of several bandwidths')
end

-- Step 2: a live record for this request id answers with the recorded decision, every bandwidth's part.
-- Record: slot,exp_s,exp_n,allowed,t_s,t_n,now_s,now_n,seq,cost,n,b_1,reset_1,retry_1,...,retry_n, then
-- its settlement once settled (settle.lua), which a replay of the acquire does not send.
if rid ~= '' and h[1] then
  local rec = redis.call('HGET', key, 'r' .. rid)
  if rec then
    local f = {}
    for x in string.gmatch(rec, '[^,]+') do f[#f + 1] = tonumber(x) end
    local es, en = now_s, now_n
    local cs, cn = tonumber(h[1]), tonumber(h[2])
    if before(es, en, cs, cn) then es, en = cs, cn end
    if before(es, en, f[2], f[3]) then
      local reply = {1, 0}
      for j = 4, 11 + 3 * f[11] do reply[#reply + 1] = f[j] end
      return reply
    end
  end
end

if h[7] or (h[3] and h[3] ~= fp) then
  return redis.error_reply('BPCONFIG stored config ' .. tostring(h[3]) .. ' differs from ' .. fp)
end

-- Step 3: refill every bandwidth to the one t = max(now, last), each by its own rate. A missing hash is a
-- fresh key: every bandwidth full, at now.
local created, ls, ln
local bal = {}
if h[1] then
  created = 0
  ls = tonumber(h[1]); ln = tonumber(h[2])
  for i = 1, nb do
    local b = h[7 + i]
    if not b then
      return redis.error_reply('BPCONFIG stored key lacks bandwidth ' .. i .. ' of ' .. fp)
    end
    bal[i] = tonumber(b)
  end
else
  -- created as in bucket.lua: 1 fresh, 2 recovering (some bandwidth emptied at the loss would not be full
  -- yet), 3 recovering and this call detected the loss. Conservative: every bandwidth empty at the loss.
  created = 1
  ls = now_s; ln = now_n
  for i = 1, nb do bal[i] = caps[i] end
  local rs, rn, detected = recovery_start()
  for i = 1, nb do
    if created == 1 and recovering(caps[i], ps[i], rs, rn) then created = 2 end
  end
  if created == 2 and recovery_policy() == 'c' then
    ls = rs; ln = rn
    for i = 1, nb do bal[i] = 0 end
  end
  if detected then created = 3 end
end
local ts, tn = now_s, now_n
if before(now_s, now_n, ls, ln) then ts, tn = ls, ln end
for i = 1, nb do
  bal[i] = refill(bal[i], caps[i], ps[i], ls, ln, ts, tn)
end

-- Step 4: allowed iff every bandwidth covers the cost; then every one is charged, otherwise none is.
local allowed = 1
for i = 1, nb do
  if bal[i] < cost_tokens * units[i] then allowed = 0 end
end
if allowed == 1 then
  for i = 1, nb do bal[i] = bal[i] - cost_tokens * units[i] end
end

-- Step 5, per bandwidth: reset, and for a denial its own wait.
local parts = {}
for i = 1, nb do
  local b, cap, p = bal[i], caps[i], ps[i]
  local reset = 0
  if b < cap then
    if p == 0 then reset = -1 else reset = ceildiv(cap - b, p) end
  end
  local retry = 0
  local c = cost_tokens * units[i]
  if allowed == 0 and b < c then
    if p == 0 then retry = -1 else retry = ceildiv(c - b, p) end
  end
  parts[#parts + 1] = b
  parts[#parts + 1] = reset
  parts[#parts + 1] = retry
end
local seq = (tonumber(h[4]) or 0) + 1

local write = {'s', ts, 'n', tn, 'k', seq}
for i = 1, nb do
  write[#write + 1] = fields[i]
  write[#write + 1] = bal[i]
end
if created > 0 then
  write[#write + 1] = 'g'
  write[#write + 1] = fp
end
redis.call('HSET', key, unpack(write))

-- Step 6: record the whole decision under the request id; the FIFO as in bucket.lua.
local xs, xn = tonumber(h[5]), tonumber(h[6])
if recording then
  local ex_s, ex_n = ts + win_s, tn + win_n
  if ex_n >= E9 then ex_s = ex_s + 1; ex_n = ex_n - E9 end
  local fields_rec = {fmt(ex_s), fmt(ex_n), allowed, fmt(ts), fmt(tn), fmt(now_s), fmt(now_n), fmt(seq),
    fmt(cost_tokens), fmt(nb)}
  for j = 1, #parts do fields_rec[#fields_rec + 1] = fmt(parts[j]) end
  store_record(key, rid, keep, table.concat(fields_rec, ','))
  if not xs or before(xs, xn, ex_s, ex_n) then xs, xn = ex_s, ex_n end
  redis.call('HSET', key, 'xs', xs, 'xn', xn)
end

-- TTL: until every bandwidth is full as seen from now (the longest reset, lag included), and never before
-- the newest live record dies; plus the floor with an injected clock (bucket.lua says why). A key with a
-- bandwidth that can never refill (p = 0, not full) does not expire. prelude.lua's key_ttl, which
-- settle.lua shares.
local ttl = key_ttl(bal, caps, ps, ts, tn, xs, xn)
if ttl then
  ttl = ttl + ttl_floor
  if ttl < 1 then ttl = 1 end
  redis.call('PEXPIRE', key, fmt(ttl))
else
  redis.call('PERSIST', key)
end

local reply = {0, created, allowed, ts, tn, now_s, now_n, seq, cost_tokens, nb}
for j = 1, #parts do reply[#reply + 1] = parts[j] end
return reply
