-- bucketproof-postgres, schema version 8: the tables, the transition's function, settle's,
-- reconfigure's and the cleanup's, and the helpers they share, created in the namespace `__NS__` (a
-- plain identifier, substituted by `schema.rs`, as is `__KEY_PARTS__`, the number of key parts) by
-- `PgLimiter::connect`. The client calls each function with one prepared statement (`acquire.sql`,
-- `settle.sql`, `reconfigure.sql`, `cleanup.sql`).
--
-- Locks, always in this order, so no two calls wait for each other in a cycle: a bucket row, then
-- key counters (several: ascending by part), then the horizon. A creation takes its part's counter
-- before any bucket row, but takes a row after it only with SKIP LOCKED (an EvictFull victim), and
-- gives the counter back (a subtransaction rolled back) when the key's row turns out to exist.
--
-- Numbers: balances are integers in units of 1/(q * 10^9) token and instants are integer nanoseconds,
-- both `numeric` (exact, unbounded): nothing is ever rounded, and refill never divides.

CREATE TABLE __NS__.bucketproof_schema (version integer NOT NULL);
INSERT INTO __NS__.bucketproof_schema VALUES (8);

-- One row per key: the bucket (one balance per bandwidth, one cursor), its transition counter, the
-- set it is on (per bandwidth: units per token / capacity units / p; a row is never read on another
-- unit grid), its request-id records and when it becomes removable.
-- The key's part (0 to __KEY_PARTS__ - 1, by a hash of the key): its row counts in that part's
-- counter, and a key bound is enforced per part.
CREATE FUNCTION __NS__.part_of(k text) RETURNS integer LANGUAGE sql IMMUTABLE AS $fn$
  SELECT ((hashtext(k)::bigint + 2147483648) % __KEY_PARTS__)::integer
$fn$;

CREATE TABLE __NS__.buckets (
  key text PRIMARY KEY,
  part integer NOT NULL GENERATED ALWAYS AS (__NS__.part_of(key)) STORED,
  balances numeric[] NOT NULL CHECK (0 <= ALL (balances)),
  last_refill numeric NOT NULL CHECK (last_refill >= 0),
  seq bigint NOT NULL,
  config text NOT NULL,
  -- Request-id records, oldest first, each [id, stamp, allowed, balances, cursor, now, cost, seq,
  -- spec] (spec: the key's override when it was decided, null for the limiter's config), and once
  -- an allowed settle reconciled it, its settlement appended: [.., actual, balances, cursor, now,
  -- spec] (the settle's report, so a retried settle answers it exactly) (jsonb numbers are numeric:
  -- exact). Kept in the row so a retry racing its original is judged under the same row lock.
  records jsonb NOT NULL,
  -- The newest record's stamp + the dedupe window (NULL: no record).
  records_until numeric,
  -- From this instant (judged at max(now, last_refill)) the bucket is full with no live record:
  -- dropping it loses nothing. NULL: never (no refill and not full, or the key has an override).
  expires_at numeric,
  -- The key's own config, set by `reconfigure` (NULL: the limiter's), as the function takes one
  -- (capacity in units, p, units per token) and as the client rebuilds it (capacity/p/q). An
  -- override is explicit state: the row is never removable, only forgotten.
  override_caps numeric[],
  override_ps numeric[],
  override_units numeric[],
  override_spec text,
  -- The key's config version: one more per reconfigure.
  version integer NOT NULL DEFAULT 0
);

-- A part's rows, in key order: where an EvictFull creation looks for a victim. Neither column ever
-- changes, so a decision's update stays a HOT update.
CREATE INDEX buckets_part ON __NS__.buckets (part, key);

-- Per part, the rows it holds (`used`: every insert and delete of a bucket row changes it in the
-- same transaction, under this row's lock) and where the next EvictFull sample of the part starts
-- (the key after which it goes on; '' from the first).
CREATE TABLE __NS__.key_counts (
  part integer PRIMARY KEY,
  used bigint NOT NULL CHECK (used >= 0),
  evict_after text NOT NULL
);
INSERT INTO __NS__.key_counts SELECT p, 0, '' FROM generate_series(0, __KEY_PARTS__ - 1) AS p;

-- The latest judgment time of a dropped bucket: a bucket created afterwards starts its cursor here
-- or later, so a caller's clock that runs back never finds credit it had already used.
CREATE TABLE __NS__.horizon (at numeric NOT NULL);
INSERT INTO __NS__.horizon VALUES (0);

-- The helpers the functions share (the one copy of each rule).

-- The largest valid cost of a key of bandwidths `caps` / `units`: the smallest capacity in tokens.
CREATE FUNCTION __NS__.cost_bound(caps numeric[], units numeric[]) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  v_bound numeric;
BEGIN
  FOR i IN 1..cardinality(caps) LOOP
    v_bound := least(v_bound, div(caps[i], units[i]));
  END LOOP;
  RETURN v_bound;
END
$fn$;

-- Every bandwidth refilled from `last` to `t` (t >= last), capped at its capacity.
CREATE FUNCTION __NS__.refilled(
  balances numeric[], last numeric, t numeric, caps numeric[], ps numeric[]
) RETURNS numeric[] LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  v_after numeric[] := balances;
BEGIN
  FOR i IN 1..cardinality(caps) LOOP
    v_after[i] := least(caps[i], balances[i] + (t - last) * ps[i]);
  END LOOP;
  RETURN v_after;
END
$fn$;

-- The key's live record of `rid` at its effective time `t` (a record is live while stamp + win >
-- t; a window of 0 keeps nothing live) and its place (1-based) in `records`; NULL when none.
CREATE FUNCTION __NS__.live_record(
  records jsonb, rid text, t numeric, win numeric, OUT o_record jsonb, OUT o_pos integer
) LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  SELECT x.r, x.pos INTO o_record, o_pos
    FROM jsonb_array_elements(records) WITH ORDINALITY AS x(r, pos)
   WHERE x.r->>0 = rid AND (x.r->>1)::numeric + win > t
   ORDER BY x.pos DESC LIMIT 1;
END
$fn$;

-- When a row holding `after` at cursor `t` becomes removable: every bandwidth full again and no
-- live record (`until`, the newest record's stamp + window; NULL: no record). NULL: never (a
-- bandwidth that does not refill and is not full, or a key with an override).
CREATE FUNCTION __NS__.removable_at(
  after numeric[], t numeric, caps numeric[], ps numeric[], until numeric, overridden boolean
) RETURNS numeric LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  v_full numeric := t;
BEGIN
  IF overridden THEN
    RETURN NULL;
  END IF;
  FOR i IN 1..cardinality(caps) LOOP
    IF after[i] < caps[i] THEN
      IF ps[i] = 0 THEN
        RETURN NULL;
      END IF;
      v_full := greatest(v_full, t + div(caps[i] - after[i] + ps[i] - 1, ps[i]));
    END IF;
  END LOOP;
  RETURN greatest(v_full, until);
END
$fn$;

-- Room for the new key `k` (no row) at `now`, under its part's counter lock, which every creation
-- of a key of that part holds until it commits: so once the lock is held and no row is found, no
-- other call can create `k` before this one does. `per_part` NULL: no bound. Answers 'new' (counted:
-- the caller inserts), 'replaced' (EvictFull: a removable row of the part was dropped in its place,
-- the horizon raised to its judgment time max(now, last_refill) exactly as the cleanup does; the
-- caller inserts), 'refused' (the part is at its bound and, under EvictFull, the sample held no
-- removable row: no row was dropped, only the sample's position moved on) or 'exists' (a call
-- created `k` meanwhile: the counter lock is given back, the caller locks that row instead).
--   An EvictFull sample is the next 64 keys of the part after its position (wrapping around), so
-- a refusal costs a bounded scan whatever the part holds.
CREATE FUNCTION __NS__.admit_new(k text, now numeric, per_part bigint, evict boolean)
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
  v_part integer := __NS__.part_of(k);
  v_used bigint;
  v_after text;
  v_seen integer;
  v_end text;
  v_victim text;
  v_j numeric;
BEGIN
  BEGIN
    SELECT c.used, c.evict_after INTO v_used, v_after
      FROM __NS__.key_counts AS c WHERE c.part = v_part FOR UPDATE;
    PERFORM 1 FROM __NS__.buckets AS b WHERE b.key = k;
    IF FOUND THEN
      RAISE EXCEPTION USING ERRCODE = 'BP001';
    END IF;
  EXCEPTION WHEN SQLSTATE 'BP001' THEN
    RETURN 'exists';
  END;
  IF per_part IS NULL OR v_used < per_part THEN
    UPDATE __NS__.key_counts AS c SET used = c.used + 1 WHERE c.part = v_part;
    RETURN 'new';
  END IF;
  IF NOT evict THEN
    RETURN 'refused';
  END IF;
  -- Past the part's last key, the sample starts again from its first.
  FOR pass IN 1..2 LOOP
    SELECT count(*), max(s.key) INTO v_seen, v_end
      FROM (SELECT b.key FROM __NS__.buckets AS b
             WHERE b.part = v_part AND b.key > v_after ORDER BY b.key LIMIT 64) AS s;
    EXIT WHEN v_seen > 0 OR v_after = '';
    v_after := '';
  END LOOP;
  SELECT b.key, greatest(now, b.last_refill) INTO v_victim, v_j
    FROM __NS__.buckets AS b
   WHERE b.part = v_part AND b.key > v_after AND b.key <= v_end AND b.expires_at <= now
   ORDER BY b.key LIMIT 1
     FOR UPDATE SKIP LOCKED;
  IF v_victim IS NULL THEN
    UPDATE __NS__.key_counts AS c
       SET evict_after = CASE WHEN v_seen < 64 THEN '' ELSE v_end END
     WHERE c.part = v_part;
    RETURN 'refused';
  END IF;
  DELETE FROM __NS__.buckets AS b WHERE b.key = v_victim;
  UPDATE __NS__.key_counts AS c SET evict_after = v_victim WHERE c.part = v_part;
  UPDATE __NS__.horizon SET at = greatest(at, v_j);
  RETURN 'replaced';
END
$fn$;

-- The whole transition (docs/semantics.md, acquire steps 1-6) in one call, atomic by the key's row
-- lock, for a key of one or several bandwidths (one element of `caps`, `ps`, `units` and of a row's
-- `balances` each; one cursor); a key with an override is decided on its own config instead.
-- `injected_now` NULL reads the server's clock once, before any wait: the cursor max(now, last)
-- never moves back. Each statement in here takes a fresh snapshot, so the horizon is read only after
-- the row was found missing under FOR UPDATE: a drop by the cleanup that raced this call has
-- committed by then (FOR UPDATE waited for it), and the fresh bucket starts at or after its judgment
-- time.
--   A cost below 1 or above the smallest capacity answers `o_bound` (that capacity) and changes
-- nothing. A live record of `rid` answers the recorded decision and changes nothing. Otherwise:
-- refill every bandwidth to t, allow iff each covers the cost, charge each if allowed, count, record
-- the id (FIFO of the newest `keep`, dead and same-id records dropped; a window of 0 records
-- nothing) and mark when the row becomes removable (every bandwidth full, no live record, no
-- override; NULL: never).
CREATE FUNCTION __NS__.acquire(
  k text, cost numeric, injected_now numeric, caps numeric[], ps numeric[], units numeric[], fp text,
  rid text, win numeric, keep integer, per_part bigint, evict boolean,
  OUT o_allowed boolean, OUT o_balances numeric[], OUT o_cursor numeric, OUT o_now numeric,
  OUT o_cost numeric, OUT o_seq bigint, OUT o_created boolean, OUT o_replayed boolean,
  OUT o_mismatch boolean, OUT o_bound numeric, OUT o_spec text, OUT o_refused boolean
) LANGUAGE plpgsql AS $fn$
DECLARE
  v_now numeric := coalesce(injected_now, trunc(extract(epoch FROM clock_timestamp()) * 1000000000));
  v_recording boolean := rid IS NOT NULL AND win > 0;
  v_n integer := cardinality(caps);
  v_balances numeric[];
  v_last numeric;
  v_seq bigint;
  v_config text;
  v_override_caps numeric[];
  v_override_ps numeric[];
  v_override_units numeric[];
  v_t numeric;
  v_hit jsonb;
  v_after numeric[];
  v_bound numeric;
  v_records jsonb;
  v_until numeric;
  v_room text;
  i integer;
BEGIN
  o_created := false;
  o_replayed := false;
  o_mismatch := false;
  o_refused := false;
  o_now := v_now;
  o_cost := cost;
  FOR attempt IN 1..100 LOOP
    -- The records only when this call has an id: a call without one neither reads nor rewrites them.
    SELECT b.balances, b.last_refill, b.seq, b.config, b.records_until,
           CASE WHEN v_recording THEN b.records END, b.override_caps, b.override_ps,
           b.override_units, b.override_spec
      INTO v_balances, v_last, v_seq, v_config, v_until, v_records, v_override_caps,
           v_override_ps, v_override_units, o_spec
      FROM __NS__.buckets AS b WHERE b.key = k FOR UPDATE;
    EXIT WHEN FOUND;
    -- No row: a fresh bucket, full at max(now, horizon), then charged, if the key bound has room
    -- (a refusal changes nothing).
    v_bound := __NS__.cost_bound(caps, units);
    IF cost < 1 OR cost > v_bound THEN
      o_bound := v_bound;
      RETURN;
    END IF;
    v_room := __NS__.admit_new(k, v_now, per_part, evict);
    IF v_room = 'refused' THEN
      o_refused := true;
      RETURN;
    END IF;
    -- Another call created the row meanwhile: lock that one.
    CONTINUE WHEN v_room = 'exists';
    SELECT greatest(v_now, h.at) INTO o_cursor FROM __NS__.horizon AS h;
    o_balances := caps;
    FOR i IN 1..v_n LOOP
      o_balances[i] := caps[i] - cost * units[i];
    END LOOP;
    v_records := CASE WHEN v_recording
                      THEN jsonb_build_array(jsonb_build_array(rid, o_cursor, true, to_jsonb(o_balances),
                                                               o_cursor, v_now, cost, 1, NULL))
                      ELSE '[]'::jsonb END;
    v_until := CASE WHEN v_recording THEN o_cursor + win END;
    -- No conflict can arise: admit_new found no row under the part's lock, held until commit.
    INSERT INTO __NS__.buckets AS b
           (key, balances, last_refill, seq, config, records, records_until, expires_at)
      VALUES (k, o_balances, o_cursor, 1, fp, v_records, v_until,
              __NS__.removable_at(o_balances, o_cursor, caps, ps, v_until, false));
    o_allowed := true;
    o_seq := 1;
    o_created := true;
    RETURN;
  END LOOP;
  IF v_config IS NULL THEN
    RAISE EXCEPTION 'bucketproof: the row of % kept vanishing', k;
  END IF;
  IF v_config <> fp THEN
    o_mismatch := true;
    RETURN;
  END IF;
  IF v_override_caps IS NOT NULL THEN
    caps := v_override_caps;
    ps := v_override_ps;
    units := v_override_units;
    v_n := cardinality(caps);
  END IF;
  v_bound := __NS__.cost_bound(caps, units);
  IF cost < 1 OR cost > v_bound THEN
    o_bound := v_bound;
    RETURN;
  END IF;
  v_t := greatest(v_now, v_last);
  IF v_recording THEN
    v_hit := (__NS__.live_record(v_records, rid, v_t, win)).o_record;
    IF v_hit IS NOT NULL THEN
      o_allowed := (v_hit->>2)::boolean;
      o_balances := ARRAY(SELECT jsonb_array_elements_text(v_hit->3))::numeric[];
      o_cursor := (v_hit->>4)::numeric;
      o_now := (v_hit->>5)::numeric;
      o_cost := (v_hit->>6)::numeric;
      o_seq := (v_hit->>7)::bigint;
      o_spec := v_hit->>8;
      o_replayed := true;
      RETURN;
    END IF;
  END IF;
  -- Refill every bandwidth to t, allow iff each covers the cost, charge each if allowed.
  v_after := __NS__.refilled(v_balances, v_last, v_t, caps, ps);
  o_allowed := true;
  FOR i IN 1..v_n LOOP
    o_allowed := o_allowed AND v_after[i] >= cost * units[i];
  END LOOP;
  IF o_allowed THEN
    FOR i IN 1..v_n LOOP
      v_after[i] := v_after[i] - cost * units[i];
    END LOOP;
  END IF;
  o_seq := v_seq + 1;
  IF v_recording THEN
    SELECT coalesce(jsonb_agg(kept.r ORDER BY kept.pos), '[]'::jsonb) INTO v_records
      FROM (SELECT r, pos, row_number() OVER (ORDER BY pos DESC) AS newer
              FROM jsonb_array_elements(v_records) WITH ORDINALITY AS x(r, pos)
             WHERE (r->>1)::numeric + win > v_t AND r->>0 <> rid) AS kept
     WHERE kept.newer < keep;
    v_records := v_records || jsonb_build_array(jsonb_build_array(rid, v_t, o_allowed,
                                                                  to_jsonb(v_after), v_t, v_now,
                                                                  cost, o_seq, o_spec));
    v_until := v_t + win;
    UPDATE __NS__.buckets AS b
       SET balances = v_after, last_refill = v_t, seq = o_seq, records = v_records,
           records_until = v_until,
           expires_at = __NS__.removable_at(v_after, v_t, caps, ps, v_until,
                                            v_override_caps IS NOT NULL)
     WHERE b.key = k;
  ELSE
    UPDATE __NS__.buckets AS b
       SET balances = v_after, last_refill = v_t, seq = o_seq,
           expires_at = __NS__.removable_at(v_after, v_t, caps, ps, v_until,
                                            v_override_caps IS NOT NULL)
     WHERE b.key = k;
  END IF;
  o_balances := v_after;
  o_cursor := v_t;
END
$fn$;

-- settle (docs/semantics.md, "settle"), under the key's row lock: reconcile the charge of the live
-- record of `rid` with `actual`. Never creates a row. `o_status`: 'ok' (a settlement: `o_allowed`,
-- `o_balances`, `o_cursor`, `o_now`, `o_charged`, `o_spec` are its report; `o_replayed` when it is
-- the recorded one), or an error that changed nothing: 'unknown' (no row, or no live record of
-- `rid`), 'mismatch' (the row is on another config), 'invalid' (`actual` above `o_bound`, the key's
-- smallest capacity), 'not_admitted' (the record's acquire was denied), 'settled' (settled already
-- with `o_actual`, another actual). Otherwise: refill every bandwidth to t = max(now, last); actual
-- <= charged gives back charged - actual to each, capped at its capacity; actual > charged decides
-- the extra as acquire does (all bandwidths or none). An allowed settlement is appended to the
-- record (its stamp and place unchanged); a denied extra leaves it open (the refill is written).
-- The row's records_until is unchanged, so it stays unremovable while the record is live.
CREATE FUNCTION __NS__.settle(
  k text, rid text, actual numeric, injected_now numeric, caps numeric[], ps numeric[],
  units numeric[], fp text, win numeric,
  OUT o_status text, OUT o_bound numeric, OUT o_allowed boolean, OUT o_balances numeric[],
  OUT o_cursor numeric, OUT o_now numeric, OUT o_charged numeric, OUT o_actual numeric,
  OUT o_replayed boolean, OUT o_spec text
) LANGUAGE plpgsql AS $fn$
DECLARE
  v_now numeric := coalesce(injected_now, trunc(extract(epoch FROM clock_timestamp()) * 1000000000));
  v_n integer := cardinality(caps);
  v_balances numeric[];
  v_last numeric;
  v_seq bigint;
  v_config text;
  v_records jsonb;
  v_until numeric;
  v_override_caps numeric[];
  v_override_ps numeric[];
  v_override_units numeric[];
  v_t numeric;
  v_hit jsonb;
  v_pos integer;
  v_after numeric[];
  v_extra numeric;
  i integer;
BEGIN
  o_replayed := false;
  o_now := v_now;
  o_actual := actual;
  SELECT b.balances, b.last_refill, b.seq, b.config, b.records, b.records_until,
         b.override_caps, b.override_ps, b.override_units, b.override_spec
    INTO v_balances, v_last, v_seq, v_config, v_records, v_until,
         v_override_caps, v_override_ps, v_override_units, o_spec
    FROM __NS__.buckets AS b WHERE b.key = k FOR UPDATE;
  IF NOT FOUND THEN
    -- Step 1 comes first, against the config a fresh key would have: then unknown.
    o_bound := __NS__.cost_bound(caps, units);
    o_status := CASE WHEN actual > o_bound THEN 'invalid' ELSE 'unknown' END;
    RETURN;
  END IF;
  IF v_config <> fp THEN
    o_status := 'mismatch';
    RETURN;
  END IF;
  IF v_override_caps IS NOT NULL THEN
    caps := v_override_caps;
    ps := v_override_ps;
    units := v_override_units;
    v_n := cardinality(caps);
  END IF;
  o_bound := __NS__.cost_bound(caps, units);
  IF actual > o_bound THEN
    o_status := 'invalid';
    RETURN;
  END IF;
  v_t := greatest(v_now, v_last);
  SELECT l.o_record, l.o_pos INTO v_hit, v_pos FROM __NS__.live_record(v_records, rid, v_t, win) AS l;
  IF v_hit IS NULL THEN
    o_status := 'unknown';
    RETURN;
  END IF;
  IF NOT (v_hit->>2)::boolean THEN
    o_status := 'not_admitted';
    RETURN;
  END IF;
  o_charged := (v_hit->>6)::numeric;
  IF v_hit->>9 IS NOT NULL THEN
    o_actual := (v_hit->>9)::numeric;
    IF o_actual <> actual THEN
      o_status := 'settled';
      RETURN;
    END IF;
    o_status := 'ok';
    o_allowed := true;
    o_balances := ARRAY(SELECT jsonb_array_elements_text(v_hit->10))::numeric[];
    o_cursor := (v_hit->>11)::numeric;
    o_now := (v_hit->>12)::numeric;
    o_spec := v_hit->>13;
    o_replayed := true;
    RETURN;
  END IF;
  v_after := __NS__.refilled(v_balances, v_last, v_t, caps, ps);
  o_allowed := true;
  IF actual <= o_charged THEN
    FOR i IN 1..v_n LOOP
      v_after[i] := least(caps[i], v_after[i] + (o_charged - actual) * units[i]);
    END LOOP;
  ELSE
    v_extra := actual - o_charged;
    FOR i IN 1..v_n LOOP
      o_allowed := o_allowed AND v_after[i] >= v_extra * units[i];
    END LOOP;
    IF o_allowed THEN
      FOR i IN 1..v_n LOOP
        v_after[i] := v_after[i] - v_extra * units[i];
      END LOOP;
    END IF;
  END IF;
  IF o_allowed THEN
    v_records := jsonb_set(v_records, ARRAY[(v_pos - 1)::text],
                           v_hit || jsonb_build_array(actual, to_jsonb(v_after), v_t, v_now, o_spec));
  END IF;
  UPDATE __NS__.buckets AS b
     SET balances = v_after, last_refill = v_t, seq = v_seq + 1, records = v_records,
         expires_at = __NS__.removable_at(v_after, v_t, caps, ps, v_until,
                                          v_override_caps IS NOT NULL)
   WHERE b.key = k;
  o_status := 'ok';
  o_balances := v_after;
  o_cursor := v_t;
END
$fn$;

-- reconfigure (docs/semantics.md, "reconfigure"), for a limiter of one bandwidth: under the key's
-- row lock, refill to t = max(now, last) under the key's config (its override, or the limiter's),
-- convert to the new unit grid rounding down (never creating tokens), clamp to the new capacity, and
-- store the new config as the key's override (version + 1; never removable from now on). A key with
-- no row is created first, fresh under the limiter's config at max(now, horizon), as an acquire would,
-- meeting the key bound as an acquire does (`o_refused`: no room, nothing changed).
CREATE FUNCTION __NS__.reconfigure(
  k text, injected_now numeric, caps numeric[], ps numeric[], units numeric[], fp text,
  new_cap numeric, new_p numeric, new_unit numeric, new_spec text, per_part bigint, evict boolean,
  OUT o_mismatch boolean, OUT o_version integer, OUT o_refused boolean
) LANGUAGE plpgsql AS $fn$
DECLARE
  v_now numeric := coalesce(injected_now, trunc(extract(epoch FROM clock_timestamp()) * 1000000000));
  v_balance numeric;
  v_last numeric;
  v_config text;
  v_cap numeric;
  v_p numeric;
  v_unit numeric;
  v_t numeric;
  v_at numeric;
  v_room text;
BEGIN
  o_mismatch := false;
  o_refused := false;
  FOR attempt IN 1..100 LOOP
    SELECT b.balances[1], b.last_refill, b.config, coalesce(b.override_caps[1], caps[1]),
           coalesce(b.override_ps[1], ps[1]), coalesce(b.override_units[1], units[1]), b.version
      INTO v_balance, v_last, v_config, v_cap, v_p, v_unit, o_version
      FROM __NS__.buckets AS b WHERE b.key = k FOR UPDATE;
    EXIT WHEN FOUND;
    v_room := __NS__.admit_new(k, v_now, per_part, evict);
    IF v_room = 'refused' THEN
      o_refused := true;
      RETURN;
    END IF;
    CONTINUE WHEN v_room = 'exists';
    SELECT greatest(v_now, h.at) INTO v_at FROM __NS__.horizon AS h;
    INSERT INTO __NS__.buckets AS b
           (key, balances, last_refill, seq, config, records, records_until, expires_at)
      VALUES (k, caps, v_at, 0, fp, '[]'::jsonb, NULL, v_at);
  END LOOP;
  IF v_config IS NULL THEN
    RAISE EXCEPTION 'bucketproof: the row of % kept vanishing', k;
  END IF;
  IF v_config <> fp THEN
    o_mismatch := true;
    RETURN;
  END IF;
  v_t := greatest(v_now, v_last);
  v_balance := (__NS__.refilled(ARRAY[v_balance], v_last, v_t, ARRAY[v_cap], ARRAY[v_p]))[1];
  o_version := o_version + 1;
  UPDATE __NS__.buckets AS b
     SET balances = ARRAY[least(new_cap, div(v_balance * new_unit, v_unit))], last_refill = v_t,
         override_caps = ARRAY[new_cap], override_ps = ARRAY[new_p],
         override_units = ARRAY[new_unit], override_spec = new_spec, version = o_version,
         expires_at = NULL
   WHERE b.key = k;
END
$fn$;

-- One bounded step of the cleanup (docs/semantics.md, "Expiry and the key bound"): examine the next
-- `batch` keys after `after` in key order, drop those whose bucket is removable at their judgment
-- time j = max(s, last_refill) (full, no live request-id record: `expires_at <= s`), take them off
-- their parts' counters and raise the namespace's horizon to the latest such j, in one transaction.
-- A row locked by a decision is skipped, never waited for (SKIP LOCKED), and a row changed since the
-- scan is judged on its latest version (FOR UPDATE re-reads it). A decision that saw a row dropped
-- here answers nothing and runs again (acquire's loop), so it never creates from the old horizon.
-- `injected_now` NULL: the server's clock.
CREATE FUNCTION __NS__.cleanup(
  injected_now numeric, after text, batch integer,
  OUT o_examined bigint, OUT o_last text, OUT o_removed bigint
) LANGUAGE plpgsql AS $fn$
DECLARE
  v_s numeric := coalesce(injected_now, trunc(extract(epoch FROM clock_timestamp()) * 1000000000));
  v_keys text[];
  v_parts integer[];
  v_j numeric;
BEGIN
  SELECT count(*), max(scan.key), coalesce(array_agg(scan.key), '{}')
    INTO o_examined, o_last, v_keys
    FROM (SELECT b.key FROM __NS__.buckets AS b WHERE b.key > after ORDER BY b.key LIMIT batch) AS scan;
  WITH victims AS (
    SELECT bk.key, bk.part, greatest(v_s, bk.last_refill) AS j
      FROM __NS__.buckets AS bk
     WHERE bk.key = ANY (v_keys) AND bk.expires_at <= v_s
       FOR UPDATE OF bk SKIP LOCKED
  ), gone AS (
    DELETE FROM __NS__.buckets AS bk USING victims AS v WHERE bk.key = v.key RETURNING v.part, v.j
  )
  SELECT coalesce(array_agg(gone.part), '{}'), max(gone.j), count(*)
    INTO v_parts, v_j, o_removed FROM gone;
  IF o_removed > 0 THEN
    PERFORM 1 FROM __NS__.key_counts AS c WHERE c.part = ANY (v_parts) ORDER BY c.part FOR UPDATE;
    UPDATE __NS__.key_counts AS c SET used = c.used - g.n
      FROM (SELECT p, count(*) AS n FROM unnest(v_parts) AS p GROUP BY p) AS g
     WHERE c.part = g.p;
    UPDATE __NS__.horizon SET at = greatest(at, v_j);
  END IF;
END
$fn$;
