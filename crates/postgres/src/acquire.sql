-- The whole transition (docs/semantics.md, acquire steps 2-5) as one statement, atomic by the key's
-- row: `INSERT .. ON CONFLICT DO UPDATE` either creates the row (a fresh bucket, full at now, then
-- charged: the cost is at most the capacity, checked by the client, and `balance >= 0` by the table)
-- or updates the latest version of it under its row lock, the SET reading the old row once: refill to
-- t = max(now, last), decide, charge if allowed, count, remember the verdict and instant.
-- A row on another config is left alone and nothing is returned (the client's ConfigMismatch).
-- `now` is read once ($3, or the server's clock_timestamp(), exact to the microsecond).
--
-- $1 key, $2 cost in whole tokens, $3 injected now in ns (NULL: the server's clock), $4 capacity in
-- units, $5 p (units per ns), $6 units per token, $7 the config's fingerprint.
WITH clock AS MATERIALIZED (
  SELECT coalesce($3::text::numeric,
                  trunc(extract(epoch FROM clock_timestamp()) * 1000000000)) AS now
)
INSERT INTO __NS__.buckets AS bk (key, balance, last_refill, seq, config, allowed, decided_at)
SELECT $1::text, $4::text::numeric - $2::text::numeric * $6::text::numeric, clock.now, 1, $7::text,
       true, clock.now
  FROM clock
ON CONFLICT (key) DO UPDATE SET (last_refill, balance, allowed, seq, decided_at) = (
  SELECT step.t,
         step.refilled - CASE WHEN step.refilled >= step.cost THEN step.cost ELSE 0 END,
         step.refilled >= step.cost,
         bk.seq + 1,
         excluded.decided_at
    FROM (SELECT cursor.t,
                 least($4::text::numeric, bk.balance + (cursor.t - bk.last_refill) * $5::text::numeric)
                   AS refilled,
                 $2::text::numeric * $6::text::numeric AS cost
            FROM (SELECT greatest(excluded.decided_at, bk.last_refill) AS t) AS cursor) AS step
)
WHERE bk.config = excluded.config
RETURNING allowed, balance::text, last_refill::text, decided_at::text, seq, (xmax = 0) AS created
