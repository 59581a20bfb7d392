-- bucketproof-postgres, schema version 2: the tables, created in the namespace `__NS__` (a plain
-- identifier, substituted by `schema.rs`) by `PgLimiter::connect`. The transition itself is one
-- statement, `acquire.sql`, prepared by the client.
--
-- Numbers: balances are integers in units of 1/(q * 10^9) token and instants are integer nanoseconds,
-- both `numeric` (exact, unbounded): nothing is ever rounded, and refill never divides.

CREATE TABLE __NS__.bucketproof_schema (version integer NOT NULL);
INSERT INTO __NS__.bucketproof_schema VALUES (2);

-- One row per key: the bucket, its transition counter, the config it is on (units per token /
-- capacity units / p: a row is never read on another unit grid) and the last decision (its verdict
-- and instant, which the statement returns).
CREATE TABLE __NS__.buckets (
  key text PRIMARY KEY,
  balance numeric NOT NULL CHECK (balance >= 0),
  last_refill numeric NOT NULL CHECK (last_refill >= 0),
  seq bigint NOT NULL,
  config text NOT NULL,
  allowed boolean NOT NULL,
  decided_at numeric NOT NULL
);
