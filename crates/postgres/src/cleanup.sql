-- One bounded step of the cleanup: the schema's `cleanup` function (schema.sql), which drops the
-- removable rows among the next keys, takes them off their parts' counters and raises the horizon.
--
-- $1 injected s in ns (NULL: the server's clock), $2 the key to continue after, $3 keys to examine.
SELECT c.o_examined, c.o_last, c.o_removed
  FROM __NS__.cleanup($1::text::numeric, $2::text, $3::text::integer) AS c
