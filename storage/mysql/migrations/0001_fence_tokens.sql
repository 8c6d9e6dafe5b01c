-- The high-water table: one row per resource key, holding the highest
-- fencing token accepted for it. The key is compared byte for byte
-- (VARBINARY: no collation folds two keys into one, no trailing-space
-- padding); 767 bytes is the longest key InnoDB indexes in every row
-- format. Tokens are the whole uint64 range (BIGINT UNSIGNED).
CREATE TABLE IF NOT EXISTS {{.Tokens}} (
    resource   VARBINARY(767)  NOT NULL PRIMARY KEY,
    token      BIGINT UNSIGNED NOT NULL,
    updated_at DATETIME(6)     NOT NULL
) ENGINE=InnoDB
