-- bucketproof-postgres, schema version 1: the tables and the transition function, created in the
-- namespace `__NS__` (a quoted identifier, substituted by `schema.rs`) by `PgLimiter::connect`.
--
-- Numbers: balances are integers in units of 1/(q * 10^9) token and instants are integer nanoseconds,
-- both `numeric` (exact, unbounded): nothing here is ever rounded, and refill never divides.

CREATE TABLE __NS__.bucketproof_schema (version integer NOT NULL);
INSERT INTO __NS__.bucketproof_schema VALUES (1);

-- One row per key: the bucket, its transition counter and the config it is on (units per token /
-- capacity units / p): a row is never read on another unit grid.
CREATE TABLE __NS__.buckets (
  key text PRIMARY KEY,
  balance numeric NOT NULL CHECK (balance >= 0),
  last_refill numeric NOT NULL CHECK (last_refill >= 0),
  seq bigint NOT NULL,
  config text NOT NULL
);

-- The whole transition (docs/semantics.md, acquire steps 1-5) in one call, atomic by the key's row
-- lock (FOR UPDATE): read, refill to t = max(now, last), decide, write. `injected_now` NULL reads the
-- server's clock (clock_timestamp(), exact to the microsecond); the cursor never moves back either
-- way. A cost of 0 or above the capacity raises SQLSTATE BPCST and changes nothing; a row on another
-- config raises BPCFG.
CREATE FUNCTION __NS__.acquire(
  k text, cost_tokens numeric, injected_now numeric, cap numeric, p numeric, unit numeric, fp text
) RETURNS TABLE (
  allowed boolean, balance_after numeric, refill_cursor numeric, decided_at numeric, seq_after bigint,
  created boolean
) LANGUAGE plpgsql AS $fn$
DECLARE
  v_now numeric := coalesce(injected_now, trunc(extract(epoch FROM clock_timestamp()) * 1000000000));
  v_cost numeric := cost_tokens * unit;
  v_balance numeric;
  v_last numeric;
  v_seq bigint;
  v_config text;
  v_t numeric;
  v_allowed boolean;
  v_created boolean := false;
BEGIN
  IF cost_tokens < 1 OR v_cost > cap THEN
    RAISE EXCEPTION USING ERRCODE = 'BPCST', MESSAGE = (cap / unit)::text;
  END IF;
  SELECT bk.balance, bk.last_refill, bk.seq, bk.config INTO v_balance, v_last, v_seq, v_config
    FROM __NS__.buckets bk WHERE bk.key = k FOR UPDATE;
  IF NOT FOUND THEN
    -- A fresh bucket: full, at now. Two first callers race here; the conflict makes the loser read
    -- (and wait for) the winner's row.
    INSERT INTO __NS__.buckets AS bk VALUES (k, cap, v_now, 0, fp) ON CONFLICT (key) DO NOTHING;
    v_created := FOUND;
    SELECT bk.balance, bk.last_refill, bk.seq, bk.config INTO v_balance, v_last, v_seq, v_config
      FROM __NS__.buckets bk WHERE bk.key = k FOR UPDATE;
  END IF;
  IF v_config <> fp THEN
    RAISE EXCEPTION USING ERRCODE = 'BPCFG',
      MESSAGE = 'stored config ' || v_config || ' differs from ' || fp;
  END IF;
  v_t := greatest(v_now, v_last);
  v_balance := least(cap, v_balance + (v_t - v_last) * p);
  v_allowed := v_balance >= v_cost;
  IF v_allowed THEN
    v_balance := v_balance - v_cost;
  END IF;
  v_seq := v_seq + 1;
  UPDATE __NS__.buckets bk SET balance = v_balance, last_refill = v_t, seq = v_seq WHERE bk.key = k;
  RETURN QUERY SELECT v_allowed, v_balance, v_t, v_now, v_seq, v_created;
END
$fn$;
