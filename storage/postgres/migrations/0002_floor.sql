-- The floor of pruned marks (Tokens.Prune). Prune deletes marks not
-- claimed for a while and raises the floor, the row of the empty resource
-- '' (no resource key is empty), to the highest mark it deleted, in the
-- same statement. A claim of a key without a row compares the token with
-- the floor in its own statement; this trigger checks the rows actually
-- inserted again, after the insert, with a fresh read, so that a claim
-- whose statement began before a Prune committed cannot re-create a
-- pruned key under a token below the mark Prune deleted: the insert
-- found no row only once Prune's DELETE had committed, and Prune raised
-- the floor in the same commit. Under REPEATABLE READ and SERIALIZABLE
-- the read locks the floor row, which fails with a serialization failure
-- rather than read an old floor. Operators' Reset sets
-- fenceguard.reset for its own insert and is not checked.
CREATE OR REPLACE FUNCTION {{.Schema}}fenceguard_floor_check() RETURNS trigger LANGUAGE plpgsql AS $fenceguard$
DECLARE
    fl bigint;
BEGIN
    IF NEW.resource = '' OR current_setting('fenceguard.reset', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF current_setting('transaction_isolation') = 'read committed' THEN
        EXECUTE format('SELECT token FROM %I.%I WHERE resource = $1', TG_TABLE_SCHEMA, TG_TABLE_NAME) INTO fl USING '';
    ELSE
        EXECUTE format('SELECT token FROM %I.%I WHERE resource = $1 FOR SHARE', TG_TABLE_SCHEMA, TG_TABLE_NAME) INTO fl USING '';
    END IF;
    IF NEW.token < fl THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_text_representation',
            MESSAGE = 'fenceguard: stale fencing token: below the floor of pruned marks',
            DETAIL = 'floor=' || fl;
    END IF;
    RETURN NULL;
END
$fenceguard$;

-- The floor's row exists from the start (token 1 refuses nothing), so that
-- the trigger's locking read under REPEATABLE READ always finds a row to
-- conflict with.
INSERT INTO {{.Tokens}} (resource, token) VALUES ('', 1) ON CONFLICT (resource) DO NOTHING;
