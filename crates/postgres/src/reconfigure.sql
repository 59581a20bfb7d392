-- A per-key reconfigure: the schema's `reconfigure` function (schema.sql), under the key's row lock.
--
-- $1 key, $2 injected now in ns (NULL: the server's clock), the limiter's bandwidths ($3 capacity in
-- units, $4 p, $5 units per token: numeric[] as text) and fingerprint ($6), the new config ($7
-- capacity in units, $8 p, $9 units per token, $10 capacity/p/q), $11 the key bound per part (NULL:
-- none), $12 whether a new key at the bound may replace a removable row (EvictFull).
SELECT r.o_mismatch, r.o_version, r.o_refused
  FROM __NS__.reconfigure($1::text, $2::text::numeric, $3::text::numeric[], $4::text::numeric[],
                          $5::text::numeric[], $6::text, $7::text::numeric, $8::text::numeric,
                          $9::text::numeric, $10::text, $11::text::bigint, $12::boolean) AS r
