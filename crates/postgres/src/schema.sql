-- bucketproof-postgres, schema version 4: the tables, created in the namespace `__NS__` (a plain
-- identifier, substituted by `schema.rs`) by `PgLimiter::connect`. The transition itself is one
-- statement, `acquire.sql`, prepared by the client; the cleanup is `cleanup.sql`.
--
-- Numbers: balances are integers in units of 1/(q * 10^9) token and instants are integer nanoseconds,
-- both `numeric` (exact, unbounded): nothing is ever rounded, and refill never divides.

CREATE TABLE __NS__.bucketproof_schema (version integer NOT NULL);
INSERT INTO __NS__.bucketproof_schema VALUES (4);

-- One row per key: the bucket (one balance per bandwidth, one cursor), its transition counter, the
-- set it is on (per bandwidth: units per token / capacity units / p; a row is never read on another
-- unit grid), its request-id records and when it becomes removable.
CREATE TABLE __NS__.buckets (
  key text PRIMARY KEY,
  balances numeric[] NOT NULL CHECK (0 <= ALL (balances)),
  last_refill numeric NOT NULL CHECK (last_refill >= 0),
  seq bigint NOT NULL,
  config text NOT NULL,
  -- The last call's verdict, and whether it was a replay (its answer is then its record).
  allowed boolean NOT NULL,
  replayed boolean NOT NULL,
  -- Request-id records, oldest first, each [id, stamp, allowed, balances, cursor, now, cost, seq]
  -- (jsonb numbers are numeric: exact). Kept in the row so a retry racing its original is judged
  -- under the same row lock.
  records jsonb NOT NULL,
  -- The newest record's stamp + the dedupe window (NULL: no record).
  records_until numeric,
  -- From this instant (judged at max(now, last_refill)) the bucket is full with no live record:
  -- dropping it loses nothing. NULL: never (no refill and not full).
  expires_at numeric
);

-- The latest judgment time of a dropped bucket: a bucket created afterwards starts its cursor here
-- or later, so a caller's clock that runs back never finds credit it had already used.
CREATE TABLE __NS__.horizon (at numeric NOT NULL);
INSERT INTO __NS__.horizon VALUES (0);
