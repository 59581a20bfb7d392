-- bucketproof: what both transition scripts (bucket.lua, one bandwidth; set.lua, several) share, put in
-- front of each by the Rust side (`script.rs`, `set.rs`), so there is one copy of the exact integer
-- helpers and of reading the decision's instant. See bucket.lua's header for the number ranges.

local E9 = 1000000000

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

local key = KEYS[1]
local now_s, now_n
if ARGV[1] == 's' then
  local tm = redis.call('TIME')
  now_s = tonumber(tm[1])
  now_n = tonumber(tm[2]) * 1000
else
  now_s = tonumber(ARGV[2])
  now_n = tonumber(ARGV[3])
end
