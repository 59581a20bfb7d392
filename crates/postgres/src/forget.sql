-- forget: drop the key's row and take it off its part's counter, in one statement (the row's lock,
-- then the counter's: the schema's lock order). Answers one row per row dropped.
--
-- $1 key.
WITH gone AS (
  DELETE FROM __NS__.buckets AS b WHERE b.key = $1::text RETURNING b.part
)
UPDATE __NS__.key_counts AS c SET used = c.used - 1 FROM gone WHERE c.part = gone.part
