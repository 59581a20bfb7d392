-- One settle: the schema's `settle` function (schema.sql), which reconciles the request's charge
-- under the key's row lock. Numbers travel as text, exact both ways.
--
-- $1 key, $2 the request id, $3 the actual cost in whole tokens, $4 injected now in ns (NULL: the
-- server's clock), per bandwidth ($5 capacity in units, $6 p = units per ns, $7 units per token:
-- numeric[] as text), $8 the set's fingerprint, $9 the dedupe window in ns.
SELECT s.o_status, s.o_bound::text, s.o_allowed, s.o_balances::text[], s.o_cursor::text,
       s.o_now::text, s.o_charged::text, s.o_actual::text, s.o_replayed, s.o_spec
  FROM __NS__.settle($1::text, $2::text, $3::text::numeric, $4::text::numeric,
                     $5::text::numeric[], $6::text::numeric[], $7::text::numeric[], $8::text,
                     $9::text::numeric) AS s
