-- The audit trail: append-only, tamper-evident, one hash chain per org.
--
-- Each event's hash covers its own content and the hash of the org's
-- previous event, so changing, removing or reordering any event breaks
-- every later link.  agent.audit_heads holds the tip of each org's chain;
-- an append updates that row (holding its lock to commit), so appends of
-- one org are serialised until the appending transaction ends and the chain
-- never forks, while different orgs never wait for each other.  Event ids
-- are drawn while the lock is held, so within an org id order is chain
-- order.

CREATE TABLE agent.audit_events (
	id				bigserial PRIMARY KEY,
	org_id			uuid NOT NULL,
	workspace_id	uuid,
	event_type		text NOT NULL,
	invocation_id	uuid,
	actor			text,
	details			jsonb NOT NULL DEFAULT '{}',
	created_at		timestamptz NOT NULL DEFAULT now(),
	prev_hash		text,
	hash			text NOT NULL
);
COMMENT ON TABLE agent.audit_events IS 'append-only, per-org hash-chained audit trail';
CREATE INDEX audit_events_org_idx ON agent.audit_events (org_id, id);
CREATE INDEX audit_events_invocation_idx ON agent.audit_events (invocation_id)
	WHERE invocation_id IS NOT NULL;

CREATE TABLE agent.audit_heads (
	org_id		uuid PRIMARY KEY,
	last_id		bigint NOT NULL,
	last_hash	text NOT NULL,
	events		bigint NOT NULL,
	-- the hash before last_hash ('' before the second event): lets an
	-- append move the tip and learn its predecessor in one statement
	prev_hash	text NOT NULL DEFAULT ''
);
COMMENT ON TABLE agent.audit_heads IS 'the tip of each org''s audit chain (its lock serialises appends)';

-- The hash of one event.  Every field is rendered in a form that does not
-- depend on session settings (timestamps as epoch microseconds, jsonb in its
-- canonical text form):
--   encode(sha256(convert_to(concat_ws(E'\x1f',
--       coalesce(prev_hash, ''), id::text, org_id::text,
--       coalesce(workspace_id::text, ''), event_type,
--       coalesce(invocation_id::text, ''), coalesce(actor, ''),
--       details::text,
--       (extract(epoch FROM created_at) * 1000000)::bigint::text),
--     'UTF8')), 'hex')
-- computed in C (src/digest.c); pgTAP checks it against this expression.
CREATE FUNCTION agent._audit_hash(prev_hash text, id bigint, org_id uuid,
								  workspace_id uuid, event_type text,
								  invocation_id uuid, actor text, details jsonb,
								  created_at timestamptz)
	RETURNS text
	AS 'MODULE_PATHNAME', 'sandbox_audit_hash'
	LANGUAGE C STABLE PARALLEL SAFE;

-- Append one event to its org's chain and return its id.  Runs in the
-- caller's transaction: if that rolls back, so does the event.  Not a
-- security definer: only the owner (the API functions, the supervisor) may
-- execute it.  In C (src/audit.c) as one prepared statement:
--
--   WITH head AS (
--       UPDATE agent.audit_heads h
--          SET prev_hash = h.last_hash,
--              (last_id, last_hash) =
--               (SELECT n.id, agent._audit_hash(nullif(h.last_hash, ''), n.id, org,
--                           workspace, event_type, invocation, actor, details, now())
--                  FROM (SELECT nextval('agent.audit_events_id_seq') AS id) n),
--              events = h.events + 1
--        WHERE h.org_id = org
--       RETURNING h.last_id, h.last_hash, h.prev_hash)
--   INSERT INTO agent.audit_events (...)
--       SELECT head.last_id, org, ..., nullif(head.prev_hash, ''), head.last_hash
--         FROM head
--   RETURNING id
--
-- The UPDATE takes the org's head lock (to commit) and, in the same
-- projection, draws the id and hashes onto the old tip; waiting for the
-- lock, it re-evaluates its SET list on the newest tip (READ COMMITTED's
-- recheck), so within an org id order is chain order and the chain never
-- forks.  The org's first event creates the head row first.  details NULL
-- is stored as '{}'.
CREATE FUNCTION agent._audit(org uuid, workspace uuid, event_type text,
							 invocation uuid, actor text, details jsonb)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'sandbox_audit'
	LANGUAGE C VOLATILE;

-- Walk an org's chain from its first event and report the first broken
-- link: an event whose hash does not match its content, whose prev_hash is
-- not its predecessor's hash, or a chain whose end is not the recorded tip
-- (events removed from the end).  Security invoker: it reads what the
-- caller may read, which for agent_auditor and the owner is every org.
CREATE FUNCTION agent.verify_audit_chain(org uuid,
	OUT ok boolean, OUT events_checked bigint, OUT broken_event_id bigint,
	OUT problem text)
	LANGUAGE plpgsql STABLE
AS $$
DECLARE
	e		record;
	v_prev	text := NULL;
	v_last	bigint := NULL;
	v_head	agent.audit_heads;
BEGIN
	IF org IS NULL THEN
		RAISE EXCEPTION 'org must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	ok := true;
	events_checked := 0;
	FOR e IN SELECT * FROM agent.audit_events a WHERE a.org_id = org ORDER BY a.id LOOP
		events_checked := events_checked + 1;
		IF e.prev_hash IS DISTINCT FROM v_prev THEN
			ok := false; broken_event_id := e.id;
			problem := CASE WHEN v_prev IS NULL
				THEN 'the first event of the chain has a predecessor hash'
				ELSE 'prev_hash does not match the previous event''s hash' END;
			RETURN;
		END IF;
		IF e.hash IS DISTINCT FROM agent._audit_hash(e.prev_hash, e.id, e.org_id,
				e.workspace_id, e.event_type, e.invocation_id, e.actor, e.details,
				e.created_at) THEN
			ok := false; broken_event_id := e.id;
			problem := 'the event''s content does not match its hash';
			RETURN;
		END IF;
		v_prev := e.hash;
		v_last := e.id;
	END LOOP;
	SELECT * INTO v_head FROM agent.audit_heads h WHERE h.org_id = org;
	IF FOUND AND (v_head.last_id IS DISTINCT FROM v_last
				  OR v_head.last_hash IS DISTINCT FROM v_prev
				  OR v_head.events <> events_checked) THEN
		ok := false; broken_event_id := v_head.last_id;
		problem := 'the chain does not end at its recorded tip (events were removed)';
	ELSIF NOT FOUND AND v_last IS NOT NULL THEN
		ok := false; broken_event_id := v_last;
		problem := 'the chain has no recorded tip';
	END IF;
END
$$;
COMMENT ON FUNCTION agent.verify_audit_chain(uuid) IS
	'check an org''s audit hash chain; reports the first broken event';

-- Append-only, for everyone including the owner.  (A superuser can still
-- disable triggers; verify_audit_chain() then shows what was changed.)
CREATE FUNCTION agent._refuse_change() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	RAISE EXCEPTION 'cannot % %.%: it is append-only', lower(TG_OP), TG_TABLE_SCHEMA, TG_TABLE_NAME
		USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_events_append_only
	BEFORE UPDATE OR DELETE ON agent.audit_events
	FOR EACH ROW EXECUTE FUNCTION agent._refuse_change();
CREATE TRIGGER audit_events_no_truncate
	BEFORE TRUNCATE ON agent.audit_events
	FOR EACH STATEMENT EXECUTE FUNCTION agent._refuse_change();
-- The tip moves forward only with an append; it is never deleted.
CREATE TRIGGER audit_heads_no_delete
	BEFORE DELETE ON agent.audit_heads
	FOR EACH ROW EXECUTE FUNCTION agent._refuse_change();
CREATE TRIGGER audit_heads_no_truncate
	BEFORE TRUNCATE ON agent.audit_heads
	FOR EACH STATEMENT EXECUTE FUNCTION agent._refuse_change();
