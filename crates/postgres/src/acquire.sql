-- One decision: the schema's `acquire` function (schema.sql), which runs the whole transition under
-- the key's row lock. Numbers travel as text, exact both ways.
--
-- $1 key, $2 cost in whole tokens, $3 injected now in ns (NULL: the server's clock), per bandwidth
-- ($4 capacity in units, $5 p = units per ns, $6 units per token: numeric[] as text), $7 the set's
-- fingerprint, $8 the request id (NULL: none), $9 the dedupe window in ns (0: ids are off), $10
-- records kept per key, $11 the key bound per part (NULL: none), $12 whether a new key at the bound
-- may replace a removable row (EvictFull).
SELECT a.o_allowed, a.o_balances::text[], a.o_cursor::text, a.o_now::text, a.o_cost::text, a.o_seq,
       a.o_created, a.o_replayed, a.o_mismatch, a.o_bound::text, a.o_spec, a.o_refused
  FROM __NS__.acquire($1::text, $2::text::numeric, $3::text::numeric, $4::text::numeric[],
                      $5::text::numeric[], $6::text::numeric[], $7::text, $8::text,
                      $9::text::numeric, $10::text::integer, $11::text::bigint, $12::boolean) AS a
