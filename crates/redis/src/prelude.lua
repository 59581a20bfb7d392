-- bucketproof: what both transition scripts (bucket.lua, one bandwidth; set.lua, several) share, put in
-- front of each by the Rust side (`script.rs`, `set.rs`), so there is one copy of the exact integer
-- helpers. See bucket.lua's header for the number ranges.
--
-- Lua makes every `local function` anew on every call of a script, at about a microsecond's worth of
-- server instructions each, so only what every decision needs is made here (refill); the rest
-- (exact division, formatting, instants, the clock, recovery) is made by `helpers()`, which a script
-- calls only on the paths that need them.

local E9 = 1000000000

local key = KEYS[1]
-- The decision's instant as two limbs; each script sets it first (from `TIME`, or its injected
-- arguments), before any helper below that reads it.
local now_s, now_n

-- The balance b (capacity cap, p units per ns) refilled from the cursor (ls, ln) to (ts, tn), not before
-- it. Exact without a division. The missing m = cap - b is at most 2^53 - 3e9 (range.rs). Below
-- 9,007,198 s of elapsed time, dt = ds * 1e9 + dn < 2^53 is an exact double, and so is the product
-- dt * p whenever it is below 2^53 (the correctly rounded product of two integers); a product at or
-- above 2^53 rounds to at least 2^53 > m, so the bucket is full either way. At 9,007,198 s or more,
-- dt > 9,007,197e9 > 2^53 - 3e9 >= m: full for any p >= 1.
local function refill(b, cap, p, ls, ln, ts, tn)
  if p == 0 or b >= cap then return b end
  local ds = ts - ls
  if ds >= 9007198 then return cap end
  local add = (ds * E9 + (tn - ln)) * p
  if add >= cap - b then return cap end
  return b + add
end

-- The helpers of the less travelled paths: floordiv, ceildiv, fmt, before, ms_until, server_time,
-- recovering, recovery_start, recovery_policy, store_record, key_ttl (in that order); with `lean`, the
-- same list without recovering, recovery_start, recovery_policy and store_record (nil in their places).
local function helpers(lean)
  -- floor(a / b) for integers 0 <= a, 1 <= b with a + b <= 2^53. The double quotient rounds at most to the
  -- next integer above the true floor, never below it; the exact products k*b <= a + b correct it.
  local function floordiv(a, b)
    local k = math.floor(a / b)
    if k * b > a then k = k - 1 end
    if (k + 1) * b <= a then k = k + 1 end
    return k
  end

  local function ceildiv(a, b)
    local k = floordiv(a, b)
    if k * b < a then k = k + 1 end
    return k
  end

  -- '%.0f' prints every integer below 2^53 exactly; tostring (and so table.concat) would use '%.14g' and
  -- round. Only strings we build ourselves need it: numbers passed straight to redis.call are converted by
  -- Redis itself with 17 significant digits (exact below 2^53), which is also cheaper.
  local function fmt(x)
    return string.format('%.0f', x)
  end

  -- (a_s, a_n) < (b_s, b_n) for two-limb instants.
  local function before(a_s, a_n, b_s, b_n)
    return a_s < b_s or (a_s == b_s and a_n < b_n)
  end

  -- ms from (from_s, from_n) until (to_s, to_n), rounded up; 0 if already reached.
  local function ms_until(from_s, from_n, to_s, to_n)
    if not before(from_s, from_n, to_s, to_n) then return 0 end
    local ds, dn = to_s - from_s, to_n - from_n
    if dn < 0 then ds = ds - 1; dn = dn + E9 end
    return ds * 1000 + ceildiv(dn, 1000000)
  end

  local function server_time()
    local tm = redis.call('TIME')
    return tonumber(tm[1]), tonumber(tm[2]) * 1000
  end

  -- The ms a key refilled to (ts, tn) must live from now, before any floor and unclamped: until every
  -- bandwidth i (balance bal[i] of caps[i], ps[i] units per ns) is full as seen from now (the cursor's
  -- lag included), and never before its newest request-id record dies at (xs, xn) (xs nil or < 0:
  -- none). nil when it must not expire: a bandwidth that can never refill (p = 0) is not full.
  -- (bucket.lua computes the same for its one bandwidth inline, so that its common path makes no
  -- function.)
  local function key_ttl(bal, caps, ps, ts, tn, xs, xn)
    local longest = 0
    for i = 1, #bal do
      if bal[i] < caps[i] then
        if ps[i] == 0 then return nil end
        local reset = ceildiv(caps[i] - bal[i], ps[i])
        if reset > longest then longest = reset end
      end
    end
    local lag_s, lag_n = ts - now_s, tn - now_n
    if lag_n < 0 then lag_s = lag_s - 1; lag_n = lag_n + E9 end
    local ttl = lag_s * 1000 + ceildiv(lag_n + longest, 1000000)
    if xs and xs >= 0 then
      local rttl = ms_until(now_s, now_n, xs, xn)
      if rttl > ttl then ttl = rttl end
    end
    return ttl
  end

  -- A caller that creates no bucket and keeps no FIFO (settle.lua) asks for the helpers above only:
  -- the four below are not made.
  if lean then
    return floordiv, ceildiv, fmt, before, ms_until, server_time, nil, nil, nil, nil, key_ttl
  end

  -- Whether a bucket created at now is recovering from its slot's loss at (rs, rn): the bucket emptied at
  -- the loss would not be full again yet.
  local function recovering(cap, p, rs, rn)
    if not rs then return false end
    local ts, tn = now_s, now_n
    if before(ts, tn, rs, rn) then ts, tn = rs, rn end
    return refill(0, cap, p, rs, rn, ts, tn) < cap
  end

  -- State loss. KEYS[2] is the epoch marker of KEYS[1]'s Cluster slot: the instant, "s:n", from which this
  -- slot's state is whole. It has no TTL, so it is gone only if the server lost its data (a restart without
  -- persistence, a flush, a failover to a replica that never had it) or evicted it under memory pressure.
  -- Only a bucket about to be created reads it, so an existing key's decision pays nothing for it.
  -- ARGV[1]'s second character is the recovery policy: 'c' conservative, 't' trusting (read only when a
  -- bucket is created).
  --
  -- recovery_start() answers (loss_s, loss_n, detected): the marker's instant, written as now when it was
  -- missing (detected = true: this call found the loss); no instant (nil) when no loss is known. A bucket created under the conservative policy is
  -- then the bucket that was empty at the loss instant and has refilled since (cursor at the loss instant,
  -- balance 0; the script's own refill step does the rest): whatever the lost bucket held, it held at least
  -- that, so no window across the loss can admit more than it would have. Once one full refill period has
  -- passed since the loss, that is a full bucket again, as for any new key.
  local function recovery_policy()
    return string.sub(ARGV[1], 2, 2)
  end
  local function recovery_start()
    -- A caller that names no marker (a bench calling the script by hand) gets no loss detection.
    if not KEYS[2] then return nil, nil, false end
    local m = redis.call('GET', KEYS[2])
    -- 'whole': marked by RedisLimiter::provision, whole since before any instant (no loss yet).
    if m == 'whole' then return nil, nil, false end
    if m then
      local a, b = string.match(m, '^(%d+):(%d+)$')
      if a then return tonumber(a), tonumber(b), false end
    end
    redis.call('SET', KEYS[2], fmt(now_s) .. ':' .. fmt(now_n))
    return now_s, now_n, true
  end

  -- Records `rest` (a record's text after its slot) under request id `rid` in the hash `hash`: a FIFO
  -- of at most `keep` records ('r<id>' -> record, 'q<slot>' -> id, 'qh', 'qt', 'qc'). A new record of
  -- an id replaces its older (dead) one, slot included, so a dead record never holds a slot that could
  -- push out another id's live record (docs/semantics.md, step 6).
  local function store_record(hash, rid, keep, rest)
    local q = redis.call('HMGET', hash, 'qh', 'qt', 'qc', 'r' .. rid)
    local qh, qt, qc = tonumber(q[1]) or 0, tonumber(q[2]) or 0, tonumber(q[3]) or 0
    if q[4] then
      redis.call('HDEL', hash, 'q' .. string.match(q[4], '^[^,]+'))
      qc = qc - 1
    end
    redis.call('HSET', hash, 'r' .. rid, fmt(qt) .. ',' .. rest, 'q' .. fmt(qt), rid)
    qt = qt + 1
    qc = qc + 1
    while qc > keep and qh < qt do
      local victim = redis.call('HGET', hash, 'q' .. fmt(qh))
      if victim then
        -- The id's record is dropped only if it is this slot's: a newer record of the same id (made
        -- after this one went stale) keeps its own, later slot.
        local vrec = redis.call('HGET', hash, 'r' .. victim)
        if vrec and tonumber(string.match(vrec, '^[^,]+')) == qh then
          redis.call('HDEL', hash, 'r' .. victim)
        end
        redis.call('HDEL', hash, 'q' .. fmt(qh))
        qc = qc - 1
      end
      qh = qh + 1
    end
    redis.call('HSET', hash, 'qh', qh, 'qt', qt, 'qc', qc)
  end

  return floordiv, ceildiv, fmt, before, ms_until, server_time, recovering, recovery_start,
    recovery_policy, store_record, key_ttl
end
