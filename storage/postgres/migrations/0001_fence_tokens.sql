-- The high-water table: one row per resource key, holding the highest
-- fencing token accepted for it. Table mode, the Fence and the tombstones
-- of column mode keep their marks here. Rows are deleted only by
-- Tokens.Prune, which raises the floor (0002) in the same statement: a mark
-- deleted without a floor would let a stale holder in.
CREATE TABLE IF NOT EXISTS {{.Tokens}} (
    resource   text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
