-- bucketproof: settle (docs/semantics.md, "settle(key, request_id, actual, now)") as one atomic Redis
-- script, for both layouts of a key: one bandwidth (bucket.lua's packed string, its records in a hash of
-- their own) and several (set.lua's hash, its records in the same hash). Find the key's live record of
-- the request id, check it, refill, refund or decide the extra, write, close the record, TTL: all here,
-- so no acquire or other settle of the key can interleave. The number rules and time limbs are
-- bucket.lua's (read its header); every value below is an integer <= capacity_units + max(p, 3e9).
--
-- KEYS[1]  the user's key (a packed string for one bandwidth, a hash for several)
-- KEYS[2]  the hash of its request-id records: PREFIX{user}:r for one bandwidth, KEYS[1] itself for
--          several (the same hash tag either way, so one Cluster slot)
-- ARGV[1]  's' = the server's TIME, 'i' = injected time in ARGV[2..3]
-- ARGV[2]  now, whole seconds           ARGV[3]  now, nanoseconds within the second
-- ARGV[4]  the TTL floor in ms (injected time; 0 with server time), as bucket.lua's
-- ARGV[5]  the request id (as acquire sends it)
-- ARGV[6]  actual, in whole tokens (0 up to the key's capacity; for several, the smallest)
-- ARGV[7]  'o': one bandwidth; ARGV[8] the default config packed as bucket.lua's ARGV[2]
--          'h': several; ARGV[8] the set's fingerprint (set.lua's ARGV[4]); ARGV[9] n; then per
--          bandwidth i (1..n) ARGV[7 + 3i .. 9 + 3i]: capacity in units, p (units per ns), units per token
--
-- Errors (nothing changed): 'BPUNKNOWN' the key holds no live record of the id (or no key: a settle never
-- creates one); 'BPACTUAL <bound>' actual above the key's capacity (its smallest); 'BPNOTADMITTED' the
-- record is of a denied acquire; 'BPSETTLED <actual>' settled already with another actual; 'BPCONFIG'
-- (or WRONGTYPE) the key is of another layout or config.
--
-- A record keeps its acquire's fields (bucket.lua's or set.lua's, which hold its cost) and, once an
-- allowed settle closed it, the settlement after them: a comma, then the same fields as the reply below
-- with the actual in place of its code (actual,t_s,t_n,now_s,now_n,seq,charged,n,b_1..b_n,o_version,
-- o_capacity,o_p,o_q), packed with `struct` as little-endian doubles as bucket.lua packs a bucket
-- (exact, and no number printed as decimal text, which costs more than the rest of the close). The
-- acquire's fields before it stay text, so an acquire's replay and the FIFO read them as before. Its
-- slot (its FIFO place) and expiry do not change. A denied extra leaves it open.
--
-- Reply: {code, t_s, t_n, now_s, now_n, seq, charged, n, b_1, ..., b_n, o_version, o_capacity, o_p, o_q}
--   code = allowed + 2 * replayed; t the cursor max(now, last) after the settle; seq the key's
--   transition counter after it; charged what the request's acquire charged, in whole tokens; b_i each
--   bandwidth's balance after it, in units; o_*: the override config the settle was made under (one
--   bandwidth only; o_version = 0: none, the default config). A replay sends the recorded settlement.
--   The caller rebuilds the exact settlement with the core's stored_settlement(s).

local _, _, fmt, before, _, server_time, _, _, _, _, key_ttl = helpers(true)
if string.sub(ARGV[1], 1, 1) == 's' then
  now_s, now_n = server_time()
else
  now_s = tonumber(ARGV[2])
  now_n = tonumber(ARGV[3])
end
local ttl_floor = tonumber(ARGV[4])
local rid = ARGV[5]
local actual = tonumber(ARGV[6])
local one = ARGV[7] == 'o'

-- The key's state, whatever its layout: per bandwidth its balance, capacity, p and grid; one cursor.
local bal, caps, ps, units = {}, {}, {}, {}
local nb, ls, ln, seq, xs, xn
-- One bandwidth: the default grid (a record made before an override was decided on it) and the override.
local default_unit, ov, stored = 0, 0, nil
-- The key does not exist: step 1 is still judged (against the config sent), then BPUNKNOWN.
local absent = false
if one then
  nb = 1
  -- A key of several bandwidths is a hash: this GET fails with WRONGTYPE (a config mismatch).
  stored = redis.call('GET', key)
  local unit, cap, p = struct.unpack('<ddd', ARGV[8])
  default_unit = unit
  local b
  if not stored then
    -- No key: judged against the default config (step 1 comes first), then unknown.
    absent = true
  elseif #stored == 80 then
    b, ls, ln, seq, xs, xn, unit, cap, p, ov = struct.unpack('<dddddddddd', stored)
  elseif #stored == 72 then
    local su, sc, sp
    b, ls, ln, seq, xs, xn, su, sc, sp = struct.unpack('<ddddddddd', stored)
    if su ~= unit or sc ~= cap or sp ~= p then
      return redis.error_reply('BPCONFIG the stored bucket is on another config')
    end
  else
    return redis.error_reply('BPCONFIG the stored key is not a one-bandwidth bucket')
  end
  bal[1], caps[1], ps[1], units[1] = b, cap, p, unit
else
  nb = tonumber(ARGV[9])
  local fields = {}
  for i = 1, nb do
    caps[i] = tonumber(ARGV[7 + 3 * i])
    ps[i] = tonumber(ARGV[8 + 3 * i])
    units[i] = tonumber(ARGV[9 + 3 * i])
    fields[i] = 'b' .. i
  end
  local h = redis.pcall('HMGET', key, 's', 'n', 'g', 'k', 'xs', 'xn', 'o', unpack(fields))
  if h.err then
    return redis.error_reply('BPCONFIG the stored key is not a key of several bandwidths')
  end
  if not h[1] then
    absent = true
  elseif h[7] or (h[3] and h[3] ~= ARGV[8]) then
    return redis.error_reply('BPCONFIG stored config ' .. tostring(h[3]) .. ' differs from ' .. ARGV[8])
  end
  if not absent then
    ls, ln, seq = tonumber(h[1]), tonumber(h[2]), tonumber(h[4]) or 0
    xs, xn = tonumber(h[5]), tonumber(h[6])
    for i = 1, nb do
      if not h[7 + i] then
        return redis.error_reply('BPCONFIG stored key lacks bandwidth ' .. i)
      end
      bal[i] = tonumber(h[7 + i])
    end
  end
end

-- Step 1: an actual above the (smallest) capacity is an error; nothing changes.
local bound = caps[1] / units[1]
for i = 2, nb do
  if caps[i] / units[i] < bound then bound = caps[i] / units[i] end
end
if actual > bound then return redis.error_reply('BPACTUAL ' .. fmt(bound)) end
if absent then return redis.error_reply('BPUNKNOWN no such key') end

-- Step 2: the key's live record of the id, judged at its effective time max(now, cursor), as a replay is.
-- Only the fields a settle reads are converted to numbers (each tonumber is a measurable share of the
-- call): the expiry, the verdict and the cost; bucket.lua's record also its override's version and q,
-- set.lua's its n (its 3n parts are skipped unread). `tail` is what follows them: '' for an open record,
-- ',<settlement>' for a settled one.
local rec = redis.call('HGET', KEYS[2], 'r' .. rid)
if not rec then return redis.error_reply('BPUNKNOWN no record') end
local ex_s, ex_n, ok, cost, rov, rq, tail
if one then
  -- slot,exp_s,exp_n,allowed,b,t_s,t_n,seq,now_s,now_n,cost,o_version,o_capacity,o_p,o_q
  ex_s, ex_n, ok, cost, rov, rq, tail = string.match(rec, '^[^,]*,([^,]*),([^,]*),([^,]*),'
    .. '[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,([^,]*),([^,]*),[^,]*,[^,]*,([^,]*)(.*)$')
else
  -- slot,exp_s,exp_n,allowed,t_s,t_n,now_s,now_n,seq,cost,n,(b_i,reset_i,retry_i) for i = 1..n
  local rn, at
  ex_s, ex_n, ok, cost, rn, at = string.match(rec, '^[^,]*,([^,]*),([^,]*),([^,]*),'
    .. '[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,([^,]*),([^,]*)()')
  if at then
    -- at: the comma before b_1; each step moves to the comma after the next part.
    for _ = 1, 3 * tonumber(rn) do at = string.find(rec, ',', at + 1, true) or #rec + 1 end
    tail = string.sub(rec, at)
  end
end
if not tail then return redis.error_reply('BPCONFIG the stored record is of another layout') end
local es, en = now_s, now_n
if before(es, en, ls, ln) then es, en = ls, ln end
if not before(es, en, tonumber(ex_s), tonumber(ex_n)) then
  return redis.error_reply('BPUNKNOWN record expired')
end
if ok ~= '1' then return redis.error_reply('BPNOTADMITTED the acquire was denied') end

-- What the acquire charged, in whole tokens: bucket.lua's record holds the cost in units of the config
-- it was decided on (its override's, or the default's); set.lua's in whole tokens.
local charged = tonumber(cost)
if one then
  local unit = default_unit
  if rov ~= '0' then unit = tonumber(rq) * E9 end
  charged = charged / unit
end

-- Step 3: settled once; the same actual replays the recorded settlement, another is an error.
if tail ~= '' then
  local reply = {struct.unpack('<' .. string.rep('d', (#tail - 1) / 8), tail, 2)}
  -- struct.unpack's last value is the position after the settlement, not a field.
  reply[#reply] = nil
  if reply[1] ~= actual then return redis.error_reply('BPSETTLED ' .. fmt(reply[1])) end
  reply[1] = 1 + 2
  return reply
end

-- Step 4: refill every bandwidth to the one t = max(now, last).
local ts, tn = now_s, now_n
if before(now_s, now_n, ls, ln) then ts, tn = ls, ln end
for i = 1, nb do bal[i] = refill(bal[i], caps[i], ps[i], ls, ln, ts, tn) end

-- Step 5: a refund, each bandwidth capped at its capacity; or the extra, all bandwidths or none.
local allowed = 1
if actual <= charged then
  local back = charged - actual
  for i = 1, nb do
    -- back * units[i] may pass 2^53 (a charge above a smaller capacity set since): then it is also
    -- above the missing units, and the bucket is full either way.
    local r = back * units[i]
    if r >= caps[i] - bal[i] then bal[i] = caps[i] else bal[i] = bal[i] + r end
  end
else
  local extra = actual - charged
  for i = 1, nb do
    if bal[i] < extra * units[i] then allowed = 0 end
  end
  if allowed == 1 then
    for i = 1, nb do bal[i] = bal[i] - extra * units[i] end
  end
end
seq = seq + 1

-- Write the key back (the refill even when the extra is denied), with its TTL as acquire computes it.
local ttl = key_ttl(bal, caps, ps, ts, tn, xs, xn)
if ttl then
  if ttl < 1 then ttl = 1 end
  ttl = ttl + ttl_floor
end
local ocap, op, oq = 0, 0, 0
if one then
  local cap, p, unit = caps[1], ps[1], units[1]
  if ov > 0 then
    ocap = cap / unit; op = p; oq = unit / E9
    -- A key with an override never expires.
    redis.call('SET', key, struct.pack('<dddddddddd', bal[1], ts, tn, seq, xs, xn, unit, cap, p, ov))
  elseif ttl then
    redis.call('SET', key, struct.pack('<ddddddddd', bal[1], ts, tn, seq, xs, xn, unit, cap, p), 'PX',
      ttl)
  else
    redis.call('SET', key, struct.pack('<ddddddddd', bal[1], ts, tn, seq, xs, xn, unit, cap, p))
  end
else
  local write = {'s', ts, 'n', tn, 'k', seq}
  for i = 1, nb do
    write[#write + 1] = 'b' .. i
    write[#write + 1] = bal[i]
  end
  redis.call('HSET', key, unpack(write))
  if ttl then redis.call('PEXPIRE', key, fmt(ttl)) else redis.call('PERSIST', key) end
end

-- Step 6: an allowed settlement closes the record (its slot and expiry unchanged); a denied extra
-- leaves it open.
local reply = {allowed, ts, tn, now_s, now_n, seq, charged, nb}
for i = 1, nb do reply[#reply + 1] = bal[i] end
for _, x in ipairs({ov, ocap, op, oq}) do reply[#reply + 1] = x end
if allowed == 1 then
  -- The settlement, the reply with the actual for its code, packed after a comma as little-endian
  -- doubles (exact: every field is an integer below 2^53), as bucket.lua packs a bucket: no number
  -- printed as decimal text.
  reply[1] = actual
  redis.call('HSET', KEYS[2], 'r' .. rid, rec .. ',' .. struct.pack('<' .. string.rep('d', #reply),
    unpack(reply)))
  reply[1] = allowed
end
return reply
