-- One bounded step of the cleanup (docs/semantics.md, "Expiry and the key bound"): examine the next
-- `$3` keys after `$2` in key order, drop those whose bucket is removable at their judgment time
-- j = max(s, last_refill) (full, no live request-id record: `expires_at <= s`), and raise the
-- namespace's horizon to the latest such j, all in one statement. A row locked by a decision is
-- skipped, never waited for (SKIP LOCKED), and a row changed since the scan is judged on its latest
-- version (FOR UPDATE re-reads it). A decision that saw a row dropped here answers nothing and runs
-- again (acquire.sql), so it never creates from the old horizon.
--
-- $1 injected s in ns (NULL: the server's clock), $2 the key to continue after, $3 keys to examine.
WITH clock AS MATERIALIZED (
  SELECT coalesce($1::text::numeric,
                  trunc(extract(epoch FROM clock_timestamp()) * 1000000000)) AS s
),
scan AS MATERIALIZED (
  SELECT key FROM __NS__.buckets WHERE key > $2::text ORDER BY key LIMIT $3::text::integer
),
victims AS (
  SELECT bk.key, greatest(clock.s, bk.last_refill) AS j
    FROM __NS__.buckets AS bk
    JOIN scan USING (key)
   CROSS JOIN clock
   WHERE bk.expires_at <= clock.s
     FOR UPDATE OF bk SKIP LOCKED
),
gone AS (
  DELETE FROM __NS__.buckets AS bk USING victims AS v WHERE bk.key = v.key RETURNING v.j
),
raised AS (
  UPDATE __NS__.horizon SET at = greatest(at, (SELECT max(j) FROM gone))
   WHERE EXISTS (SELECT 1 FROM gone)
)
SELECT (SELECT count(*) FROM scan) AS examined,
       (SELECT max(key) FROM scan) AS last,
       (SELECT count(*) FROM gone) AS removed
