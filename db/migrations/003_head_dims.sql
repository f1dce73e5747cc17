-- 003: attention-shaped ops (rope_kv, attention) are keyed by query heads,
-- key/value heads and head dimension as well as m/n/k.
ALTER TABLE problems ADD COLUMN h INTEGER NOT NULL DEFAULT 0;
ALTER TABLE problems ADD COLUMN g INTEGER NOT NULL DEFAULT 0;
ALTER TABLE problems ADD COLUMN d INTEGER NOT NULL DEFAULT 0;
