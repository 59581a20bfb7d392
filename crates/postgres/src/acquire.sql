-- The whole transition (docs/semantics.md, acquire steps 2-6) as one statement, atomic by the key's
-- row, for a key of one or several bandwidths: each bandwidth is one element of the arrays, all
-- refilled to one cursor, all charged or none. `now` is read once ($3, or the server's
-- clock_timestamp(), exact to the microsecond).
--
-- `bucket` updates the latest version of the row under its row lock (READ COMMITTED re-reads it after
-- waiting): a live record of the request id answers the recorded decision and changes nothing;
-- otherwise refill every bandwidth to t = max(now, last), allow iff each covers the cost, charge each
-- if allowed, count, record the id (FIFO of the newest `keep`, dead and same-id records dropped) and
-- mark when the row becomes removable (every bandwidth full, no live record).
-- `fresh` creates the row (every bandwidth full at max(now, horizon), then charged: the cost is at
-- most the smallest capacity, checked by the client) only if the statement's snapshot saw no row for
-- the key. So a row the cleanup dropped after this snapshot makes the statement answer nothing rather
-- than create from a stale horizon, and so does a row another call created meanwhile (ON CONFLICT DO
-- NOTHING): the client runs it again, on a snapshot that sees the cleanup's horizon or the new row. A
-- row on another config is left alone and answered as one NULL row (the client's ConfigMismatch).
--
-- $1 key, $2 cost in whole tokens, $3 injected now in ns (NULL: the server's clock), per bandwidth
-- ($4 capacity in units, $5 p = units per ns, $6 units per token: numeric[] as text), $7 the set's
-- fingerprint, $8 the request id (NULL: none), $9 the dedupe window in ns (0: ids are off), $10
-- records kept per key.
WITH clock AS MATERIALIZED (
  SELECT coalesce($3::text::numeric,
                  trunc(extract(epoch FROM clock_timestamp()) * 1000000000)) AS now,
         $8::text IS NOT NULL AND $9::text::numeric > 0 AS recording,
         $4::text::numeric[] AS caps,
         $5::text::numeric[] AS ps,
         ARRAY(SELECT $2::text::numeric * u.unit
                 FROM unnest($6::text::numeric[]) WITH ORDINALITY AS u(unit, i) ORDER BY u.i) AS costs
),
seen AS MATERIALIZED (
  SELECT config FROM __NS__.buckets WHERE key = $1::text
),
bucket AS (
  UPDATE __NS__.buckets AS bk
     SET (last_refill, balances, seq, allowed, replayed, records, records_until, expires_at) = (
       SELECT CASE WHEN s.hit THEN bk.last_refill ELSE s.t END,
              CASE WHEN s.hit THEN bk.balances ELSE s.after END,
              bk.seq + CASE WHEN s.hit THEN 0 ELSE 1 END,
              CASE WHEN s.hit THEN bk.allowed ELSE s.ok END,
              s.hit,
              CASE WHEN s.hit OR NOT clock.recording THEN bk.records
                   ELSE (SELECT coalesce(jsonb_agg(kept.r ORDER BY kept.i), '[]'::jsonb)
                           FROM (SELECT r, i, row_number() OVER (ORDER BY i DESC) AS newer
                                   FROM jsonb_array_elements(bk.records) WITH ORDINALITY AS x(r, i)
                                  WHERE (r->>1)::numeric + $9::text::numeric > s.t
                                    AND r->>0 <> $8::text) AS kept
                          WHERE kept.newer < $10::text::integer)
                        || jsonb_build_array(jsonb_build_array($8::text, s.t, s.ok, to_jsonb(s.after),
                                                               s.t, clock.now, $2::text::numeric,
                                                               bk.seq + 1)) END,
              CASE WHEN s.hit OR NOT clock.recording THEN bk.records_until
                   ELSE s.t + $9::text::numeric END,
              CASE WHEN s.hit THEN bk.expires_at
                   WHEN s.full_at IS NULL THEN NULL
                   ELSE greatest(s.full_at, CASE WHEN clock.recording THEN s.t + $9::text::numeric
                                                 ELSE bk.records_until END) END
         FROM (SELECT c.t, v.ok,
                      clock.recording AND EXISTS (
                        SELECT 1 FROM jsonb_array_elements(bk.records) AS rec(r)
                         WHERE rec.r->>0 = $8::text
                           AND (rec.r->>1)::numeric + $9::text::numeric > c.t) AS hit,
                      a.after, a.full_at
                 FROM (SELECT greatest(clock.now, bk.last_refill) AS t) AS c,
                      LATERAL (SELECT array_agg(least(u.cap, u.b + (c.t - bk.last_refill) * u.p)
                                                ORDER BY u.i) AS refilled
                                 FROM unnest(bk.balances, clock.caps, clock.ps)
                                      WITH ORDINALITY AS u(b, cap, p, i)) AS f,
                      LATERAL (SELECT bool_and(x.r >= x.cost) AS ok
                                 FROM unnest(f.refilled, clock.costs) AS x(r, cost)) AS v,
                      -- Full again at the latest bandwidth's instant; never (NULL) if one that is
                      -- not full has no refill.
                      LATERAL (SELECT array_agg(y.a ORDER BY y.i) AS after,
                                      CASE WHEN bool_or(y.a < y.cap AND y.p = 0) THEN NULL
                                           ELSE max(CASE WHEN y.a = y.cap THEN c.t
                                                         ELSE c.t + div(y.cap - y.a + y.p - 1, nullif(y.p, 0))
                                                    END) END AS full_at
                                 FROM (SELECT x.i, x.cap, x.p,
                                              x.r - CASE WHEN v.ok THEN x.cost ELSE 0 END AS a
                                         FROM unnest(f.refilled, clock.costs, clock.caps, clock.ps)
                                              WITH ORDINALITY AS x(r, cost, cap, p, i)) AS y) AS a
              ) AS s
     )
    FROM clock
   WHERE bk.key = $1::text AND bk.config = $7::text
  RETURNING bk.allowed, bk.replayed, bk.balances, bk.last_refill, bk.seq, bk.records
),
fresh AS (
  INSERT INTO __NS__.buckets AS bk (key, balances, last_refill, seq, config, allowed, replayed,
                                    records, records_until, expires_at)
  SELECT $1::text, f.after, f.c, 1, $7::text, true, false,
         CASE WHEN clock.recording
              THEN jsonb_build_array(jsonb_build_array($8::text, f.c, true, to_jsonb(f.after), f.c,
                                                       clock.now, $2::text::numeric, 1))
              ELSE '[]'::jsonb END,
         CASE WHEN clock.recording THEN f.c + $9::text::numeric END,
         CASE WHEN f.wait IS NULL THEN NULL
              ELSE greatest(f.c + f.wait,
                            CASE WHEN clock.recording THEN f.c + $9::text::numeric END) END
    FROM clock,
         LATERAL (SELECT greatest(clock.now, h.at) AS c,
                         ARRAY(SELECT x.cap - x.cost
                                 FROM unnest(clock.caps, clock.costs) WITH ORDINALITY AS x(cap, cost, i)
                                ORDER BY x.i) AS after,
                         -- Every bandwidth is charged, so none is full: never full again if one
                         -- has no refill.
                         (SELECT CASE WHEN bool_or(x.p = 0) THEN NULL
                                      ELSE max(div(x.cost + x.p - 1, nullif(x.p, 0))) END
                            FROM unnest(clock.costs, clock.ps) AS x(cost, p)) AS wait
                    FROM __NS__.horizon AS h) AS f
   WHERE NOT EXISTS (SELECT 1 FROM seen)
  ON CONFLICT (key) DO NOTHING
  RETURNING bk.balances, bk.last_refill
)
SELECT CASE WHEN b.replayed THEN (rec.r->>2)::boolean ELSE b.allowed END AS allowed,
       CASE WHEN b.replayed THEN ARRAY(SELECT jsonb_array_elements_text(rec.r->3))
            ELSE b.balances::text[] END AS balances,
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
SELECT true, f.balances::text[], f.last_refill::text, clock.now::text, $2::text, 1::bigint, true,
       false
  FROM fresh AS f CROSS JOIN clock
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM seen
 WHERE seen.config <> $7::text
