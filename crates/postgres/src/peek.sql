-- Read-only: the time to peek at ($2, or the server's clock), the key's row (if any) and the
-- namespace's horizon, from one snapshot, so they cannot straddle a write. Nothing is written.
--
-- $1 key, $2 injected now in ns (NULL: the server's clock).
SELECT coalesce($2::text::numeric, trunc(extract(epoch FROM clock_timestamp()) * 1000000000))::text,
       bk.balances::text[], bk.last_refill::text, bk.config, h.at::text, bk.override_spec
  FROM __NS__.horizon AS h
  LEFT JOIN __NS__.buckets AS bk ON bk.key = $1::text
