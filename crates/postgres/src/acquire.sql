-- The whole transition (docs/semantics.md, acquire steps 2-6) as one statement, atomic by the key's
-- row. `now` is read once ($3, or the server's clock_timestamp(), exact to the microsecond).
--
-- `bucket` updates the latest version of the row under its row lock (READ COMMITTED re-reads it after
-- waiting): a live record of the request id answers the recorded decision and changes nothing;
-- otherwise refill to t = max(now, last), decide, charge if allowed, count, record the id (FIFO of
-- the newest `keep`, dead and same-id records dropped) and mark when the row becomes removable.
-- `fresh` creates the row (full at max(now, horizon), then charged: the cost is at most the
-- capacity, checked by the client) only if the statement's snapshot saw no row for the key. So a row
-- the cleanup dropped after this snapshot makes the statement answer nothing rather than create from
-- a stale horizon, and so does a row another call created meanwhile (ON CONFLICT DO NOTHING): the
-- client runs it again, on a snapshot that sees the cleanup's horizon or the new row. A row on another
-- config is left alone and answered as one NULL row (the client's ConfigMismatch).
--
-- $1 key, $2 cost in whole tokens, $3 injected now in ns (NULL: the server's clock), $4 capacity in
-- units, $5 p (units per ns), $6 units per token, $7 the config's fingerprint, $8 the request id
-- (NULL: none), $9 the dedupe window in ns (0: ids are off), $10 records kept per key.
WITH clock AS MATERIALIZED (
  SELECT coalesce($3::text::numeric,
                  trunc(extract(epoch FROM clock_timestamp()) * 1000000000)) AS now,
         $2::text::numeric * $6::text::numeric AS cost,
         $8::text IS NOT NULL AND $9::text::numeric > 0 AS recording
),
seen AS MATERIALIZED (
  SELECT config FROM __NS__.buckets WHERE key = $1::text
),
bucket AS (
  UPDATE __NS__.buckets AS bk
     SET (last_refill, balance, seq, allowed, replayed, records, records_until, expires_at) = (
       SELECT CASE WHEN d.hit THEN bk.last_refill ELSE d.t END,
              CASE WHEN d.hit THEN bk.balance ELSE d.after END,
              bk.seq + CASE WHEN d.hit THEN 0 ELSE 1 END,
              CASE WHEN d.hit THEN bk.allowed ELSE d.ok END,
              d.hit,
              CASE WHEN d.hit OR NOT clock.recording THEN bk.records
                   ELSE (SELECT coalesce(jsonb_agg(kept.r ORDER BY kept.i), '[]'::jsonb)
                           FROM (SELECT r, i, row_number() OVER (ORDER BY i DESC) AS newer
                                   FROM jsonb_array_elements(bk.records) WITH ORDINALITY AS x(r, i)
                                  WHERE (r->>1)::numeric + $9::text::numeric > d.t
                                    AND r->>0 <> $8::text) AS kept
                          WHERE kept.newer < $10::text::integer)
                        || jsonb_build_array(jsonb_build_array($8::text, d.t, d.ok, d.after, d.t,
                                                               clock.now, $2::text::numeric,
                                                               bk.seq + 1)) END,
              CASE WHEN d.hit OR NOT clock.recording THEN bk.records_until
                   ELSE d.t + $9::text::numeric END,
              CASE WHEN d.hit THEN bk.expires_at
                   WHEN d.after = $4::text::numeric THEN
                     greatest(d.t, CASE WHEN clock.recording THEN d.t + $9::text::numeric
                                        ELSE bk.records_until END)
                   WHEN $5::text::numeric = 0 THEN NULL
                   ELSE greatest(d.t + div($4::text::numeric - d.after + $5::text::numeric - 1,
                                           $5::text::numeric),
                                 CASE WHEN clock.recording THEN d.t + $9::text::numeric
                                      ELSE bk.records_until END) END
         FROM (SELECT r.t, r.hit, r.refilled >= clock.cost AS ok,
                      r.refilled - CASE WHEN r.refilled >= clock.cost THEN clock.cost ELSE 0 END
                        AS after
                 FROM (SELECT c.t,
                              least($4::text::numeric,
                                    bk.balance + (c.t - bk.last_refill) * $5::text::numeric)
                                AS refilled,
                              clock.recording AND EXISTS (
                                SELECT 1 FROM jsonb_array_elements(bk.records) AS rec(r)
                                 WHERE rec.r->>0 = $8::text
                                   AND (rec.r->>1)::numeric + $9::text::numeric > c.t) AS hit
                         FROM (SELECT greatest(clock.now, bk.last_refill) AS t) AS c) AS r) AS d
     )
    FROM clock
   WHERE bk.key = $1::text AND bk.config = $7::text
  RETURNING bk.allowed, bk.replayed, bk.balance, bk.last_refill, bk.seq, bk.records
),
fresh AS (
  INSERT INTO __NS__.buckets AS bk (key, balance, last_refill, seq, config, allowed, replayed,
                                    records, records_until, expires_at)
  SELECT $1::text, $4::text::numeric - clock.cost, f.c, 1, $7::text, true, false,
         CASE WHEN clock.recording
              THEN jsonb_build_array(jsonb_build_array($8::text, f.c, true,
                                                       $4::text::numeric - clock.cost, f.c,
                                                       clock.now, $2::text::numeric, 1))
              ELSE '[]'::jsonb END,
         CASE WHEN clock.recording THEN f.c + $9::text::numeric END,
         CASE WHEN $5::text::numeric = 0 THEN NULL
              ELSE greatest(f.c + div(clock.cost + $5::text::numeric - 1, $5::text::numeric),
                            CASE WHEN clock.recording THEN f.c + $9::text::numeric END) END
    FROM clock,
         (SELECT greatest(clock.now, h.at) AS c FROM clock, __NS__.horizon AS h) AS f
   WHERE NOT EXISTS (SELECT 1 FROM seen)
  ON CONFLICT (key) DO NOTHING
  RETURNING bk.balance, bk.last_refill
)
SELECT CASE WHEN b.replayed THEN (rec.r->>2)::boolean ELSE b.allowed END AS allowed,
       CASE WHEN b.replayed THEN rec.r->>3 ELSE b.balance::text END AS balance,
       CASE WHEN b.replayed THEN rec.r->>4 ELSE b.last_refill::text END AS cursor,
       CASE WHEN b.replayed THEN rec.r->>5 ELSE clock.now::text END AS now,
       CASE WHEN b.replayed THEN rec.r->>6 ELSE $2::text END AS cost,
       CASE WHEN b.replayed THEN (rec.r->>7)::bigint ELSE b.seq END AS seq,
       false AS created,
       b.replayed
  FROM bucket AS b
  CROSS JOIN clock
  LEFT JOIN LATERAL (SELECT x.r FROM jsonb_array_elements(b.records) AS x(r)
                      WHERE b.replayed AND x.r->>0 = $8::text LIMIT 1) AS rec ON true
UNION ALL
SELECT true, f.balance::text, f.last_refill::text, clock.now::text, $2::text, 1::bigint, true, false
  FROM fresh AS f CROSS JOIN clock
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM seen
 WHERE seen.config <> $7::text
