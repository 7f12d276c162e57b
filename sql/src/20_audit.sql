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
	hash			text NOT NULL,
	-- how hash encodes the event (agent._audit_hash): 2 for every event
	-- appended since 0.3.0, 1 for those appended before
	hash_version	smallint NOT NULL DEFAULT 2 CHECK (hash_version IN (1, 2))
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

-- The hash of one event, in one of two versions (hash_version).  Every
-- field is rendered in a form that does not depend on session settings
-- (timestamps as epoch microseconds, jsonb in its canonical text form).
--
-- Version 2 (every event appended since 0.3.0) frames each field, so the
-- input has exactly one reading and NULL is not the empty string:
--   encode(sha256(convert_to('sandbox_ext audit v2', 'UTF8')
--       || f(prev_hash) || f(id::text) || f(org_id::text)
--       || f(workspace_id::text) || f(event_type) || f(invocation_id::text)
--       || f(actor) || f(details::text)
--       || f((extract(epoch FROM created_at) * 1000000)::bigint::text)), 'hex')
--   where f(t) = CASE WHEN t IS NULL THEN '\x2d'::bytea      -- '-'
--                ELSE convert_to(octet_length(convert_to(t, 'UTF8')) || ':', 'UTF8')
--                     || convert_to(t, 'UTF8') END
--
-- Version 1 (events appended before 0.3.0) joined the fields with \x1f and
-- left a NULL field out with its separator, so a field holding \x1f could
-- be re-split into two without changing the hash:
--   encode(sha256(convert_to(concat_ws(E'\x1f',
--       coalesce(prev_hash, ''), id::text, org_id::text,
--       coalesce(workspace_id::text, ''), event_type,
--       coalesce(invocation_id::text, ''), coalesce(actor, ''),
--       details::text,
--       (extract(epoch FROM created_at) * 1000000)::bigint::text),
--     'UTF8')), 'hex')
-- verify_audit_chain() accepts a version 1 event only when its input has
-- one reading (agent._audit_v1_unambiguous).  A version 2 input starts
-- with 's', which no version 1 input can (a hex prev_hash, or \x1f), so an
-- event's version cannot be changed under the same hash either.
-- Computed in C (src/digest.c); pgTAP checks both against these formulas.
CREATE FUNCTION agent._audit_hash(hash_version integer, prev_hash text, id bigint,
								  org_id uuid, workspace_id uuid, event_type text,
								  invocation_id uuid, actor text, details jsonb,
								  created_at timestamptz)
	RETURNS text
	AS 'MODULE_PATHNAME', 'sandbox_audit_hash'
	LANGUAGE C STABLE PARALLEL SAFE;

-- Whether a version 1 event's hash input has one reading: no field that
-- concat_ws left out when NULL is NULL, and no text field holds the
-- separator (jsonb's text form escapes it, uuids and numbers cannot hold
-- it).  prev_hash NULL against '' is told apart by the chain's links, and
-- actor NULL against '' hash alike (docs/security.md).
CREATE FUNCTION agent._audit_v1_unambiguous(prev_hash text, id bigint, org_id uuid,
											  event_type text, actor text, details jsonb,
											  created_at timestamptz)
	RETURNS boolean
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp
AS $$
	SELECT id IS NOT NULL AND org_id IS NOT NULL AND event_type IS NOT NULL
	   AND details IS NOT NULL AND created_at IS NOT NULL
	   AND strpos(event_type, E'\x1f') = 0
	   AND strpos(coalesce(actor, ''), E'\x1f') = 0
	   AND strpos(coalesce(prev_hash, ''), E'\x1f') = 0
$$;

-- Append one event to its org's chain and return its id.  Runs in the
-- caller's transaction: if that rolls back, so does the event.  Not a
-- security definer: only the owner (the API functions, the supervisor) may
-- execute it.  In C (src/audit.c) as one prepared statement:
--
--   WITH head AS (
--       UPDATE agent.audit_heads h
--          SET prev_hash = h.last_hash,
--              (last_id, last_hash) =
--               (SELECT n.id, agent._audit_hash(2, nullif(h.last_hash, ''), n.id, org,
--                           workspace, event_type, invocation, actor, details, now())
--                  FROM (SELECT nextval('agent.audit_events_id_seq') AS id) n),
--              events = h.events + 1
--        WHERE h.org_id = org
--       RETURNING h.last_id, h.last_hash, h.prev_hash)
--   INSERT INTO agent.audit_events (...)
--       SELECT head.last_id, org, ..., nullif(head.prev_hash, ''), head.last_hash, 2
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

-- A refused request's event (capability.invoke_denied) is appended in the
-- caller's transaction like every event, and kept by this backend until
-- that transaction ends: if it, or the subtransaction of the request,
-- rolls back, the supervisor appends the event again in a transaction of
-- its own, with rolled_back and refused_at added to its details; what its
-- bounded queue cannot hold is appended as a count
-- (capability.invoke_denied_counted).  In C (src/refusals.c); a no-op when
-- the library is not preloaded.
CREATE FUNCTION agent._keep_refusal(org uuid, workspace uuid, actor text, details jsonb)
	RETURNS void
	AS 'MODULE_PATHNAME', 'sandbox_keep_refusal'
	LANGUAGE C VOLATILE;

-- The tip of an audit chain moves only with an append: agent._audit (C,
-- src/audit.c) raises a backend-local flag around its own statement, and
-- this guard (C, src/audit.c) refuses every INSERT, UPDATE or DELETE of
-- agent.audit_heads made without it, and an append-time change that does
-- not move the tip by exactly one event.  Marked ENABLE ALWAYS below, so
-- session_replication_role = replica does not switch it off; a superuser
-- who disables or drops it is caught by the anchors (docs/security.md).
CREATE FUNCTION agent._audit_heads_guard() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_audit_heads_guard'
	LANGUAGE C;

-- Audit anchors: the exporter publishes each org's chain head (org_id,
-- last_id, last_hash, events) to an append-only ClickHouse table
-- (sandbox.clickhouse_anchor_table, docs/export.md) with every export batch
-- and every sandbox.anchor_interval; only heads that committed (and whose
-- commit is flushed) are published.

-- The heads an anchor round publishes (read by the exporter, src/anchor.c).
CREATE FUNCTION agent._audit_anchor_heads(OUT org_id uuid, OUT last_id bigint,
										  OUT last_hash text, OUT events bigint)
	RETURNS SETOF record
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
AS $$
	SELECT h.org_id, h.last_id, h.last_hash, h.events
	  FROM agent.audit_heads h
	 WHERE h.events OPERATOR(pg_catalog.>) 0
$$;

-- Whether anchors are published and checked: sandbox.clickhouse_url is
-- set.  (The URL itself is a superuser-only setting; this tells an auditor
-- no more than whether it is empty.)
CREATE FUNCTION agent._audit_anchors_configured() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_audit_anchors_configured'
	LANGUAGE C VOLATILE;

-- Every anchor ClickHouse holds for an org, read from ClickHouse itself
-- (never from a copy in this database, which a superuser could rewrite),
-- one row per anchored event in chain order: the hash and the number of
-- events the chain had up to it, how many different (hash, events) pairs
-- ClickHouse holds for that event (1 unless someone else wrote there), and
-- when ClickHouse first received it.  An ERROR when ClickHouse cannot be
-- read; no rows when the export is off.  In C (src/anchor.c).
CREATE FUNCTION agent._audit_anchors(org uuid,
	OUT last_id bigint, OUT last_hash text, OUT events bigint,
	OUT variants bigint, OUT anchored_at timestamptz)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'sandbox_audit_anchors'
	LANGUAGE C VOLATILE STRICT;

-- Walk an org's chain from its first event and report the first broken
-- link: an event whose hash does not match its content, whose prev_hash is
-- not its predecessor's hash, a version 1 event whose hash input has more
-- than one reading or that follows a version 2 event, or a chain whose end
-- is not the recorded tip (events removed from the end).  While the export is configured, the walk
-- is also checked against every anchor ClickHouse holds for the org: the
-- chain must contain each anchored event with the anchored hash at the
-- anchored position, so a rewrite, re-hash, insertion or removal at or
-- before the last anchor is found even when the chain and its tip were
-- made consistent again (docs/security.md says what is not found).
-- anchors_checked is NULL when the export is off (nothing to compare
-- with); anchor_last_id and anchored_at name the latest anchor compared.
-- The anchors are read before the events, each with its own snapshot
-- (hence VOLATILE and READ COMMITTED), so an anchor published meanwhile
-- is never newer than the events read.  Security invoker: it reads what
-- the caller may read, which for agent_auditor and the owner is every org.
CREATE FUNCTION agent.verify_audit_chain(org uuid,
	OUT ok boolean, OUT events_checked bigint, OUT broken_event_id bigint,
	OUT problem text, OUT anchors_checked bigint, OUT anchor_last_id bigint,
	OUT anchored_at timestamptz)
	LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
	e		record;
	a_id	bigint;
	a_hash	text;
	a_events bigint;
	a_variants bigint;
	a_at	timestamptz;
	v_anchors refcursor;
	v_open	boolean := false;
	v_more	boolean := false;	-- a_* hold the next anchor to compare
	v_prev	text := NULL;
	v_last	bigint := NULL;
	v_version integer := 1;		-- the previous event's hash_version
	v_head	agent.audit_heads;
BEGIN
	IF org IS NULL THEN
		RAISE EXCEPTION 'org must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	ok := true;
	events_checked := 0;
	IF agent._audit_anchors_configured() THEN
		IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
			RAISE EXCEPTION 'cannot verify an audit chain against its anchors in a % transaction',
				pg_catalog.current_setting('transaction_isolation')
				USING ERRCODE = 'invalid_transaction_state',
					  DETAIL = 'An anchor published after the transaction''s snapshot would look like removed events.',
					  HINT = 'Call agent.verify_audit_chain() in a READ COMMITTED transaction.';
		END IF;
		anchors_checked := 0;
		-- The first FETCH reads every anchor (a materialised set) before
		-- the walk below takes its snapshot.
		OPEN v_anchors FOR SELECT * FROM agent._audit_anchors(org) x ORDER BY x.last_id;
		v_open := true;
		FETCH v_anchors INTO a_id, a_hash, a_events, a_variants, a_at;
		v_more := FOUND;
	END IF;
	-- An org nobody knows: not in agent.orgs, no event, no tip, no anchor
	-- (an org whose rows were all deleted still has its anchors, and is
	-- walked: the walk reports the removal).
	IF NOT v_more
	   AND NOT EXISTS (SELECT 1 FROM agent.orgs o WHERE o.id = org)
	   AND NOT EXISTS (SELECT 1 FROM agent.audit_heads h WHERE h.org_id = org)
	   AND NOT EXISTS (SELECT 1 FROM agent.audit_events ae WHERE ae.org_id = org) THEN
		IF v_open THEN
			CLOSE v_anchors;
		END IF;
		RAISE EXCEPTION 'org % does not exist', org
			USING ERRCODE = 'no_data_found',
				  DETAIL = 'It has no audit events, no chain tip and no anchor.';
	END IF;
	<<walk>>
	BEGIN
		FOR e IN SELECT * FROM agent.audit_events ae WHERE ae.org_id = org ORDER BY ae.id LOOP
			events_checked := events_checked + 1;
			IF e.prev_hash IS DISTINCT FROM v_prev THEN
				ok := false; broken_event_id := e.id;
				problem := CASE WHEN v_prev IS NULL
					THEN 'the first event of the chain has a predecessor hash'
					ELSE 'prev_hash does not match the previous event''s hash' END;
				EXIT walk;
			END IF;
			IF e.hash_version IS NULL OR e.hash_version NOT IN (1, 2) THEN
				ok := false; broken_event_id := e.id;
				problem := pg_catalog.format('the event has an unknown audit hash version (%s)',
											 coalesce(e.hash_version::text, 'NULL'));
				EXIT walk;
			ELSIF e.hash_version < v_version THEN
				ok := false; broken_event_id := e.id;
				problem := pg_catalog.format('the event has audit hash version %s after an event of version %s',
											 e.hash_version, v_version);
				EXIT walk;
			END IF;
			IF e.hash_version = 1
			   AND NOT agent._audit_v1_unambiguous(e.prev_hash, e.id, e.org_id, e.event_type,
												   e.actor, e.details, e.created_at) THEN
				ok := false; broken_event_id := e.id;
				problem := 'the event''s version 1 hash input has more than one reading (a field holds the separator, or a field was made NULL): its content was changed';
				EXIT walk;
			END IF;
			IF e.hash IS DISTINCT FROM agent._audit_hash(e.hash_version, e.prev_hash, e.id,
					e.org_id, e.workspace_id, e.event_type, e.invocation_id, e.actor,
					e.details, e.created_at) THEN
				ok := false; broken_event_id := e.id;
				problem := 'the event''s content does not match its hash';
				EXIT walk;
			END IF;
			v_version := e.hash_version::integer;
			v_prev := e.hash;
			v_last := e.id;
			WHILE v_more AND a_id <= e.id LOOP
				anchors_checked := anchors_checked + 1;
				anchor_last_id := a_id;
				anchored_at := a_at;
				ok := false;
				IF a_variants > 1 THEN
					broken_event_id := a_id;
					problem := pg_catalog.format('ClickHouse holds %s different anchors of event %s: one of them was not published by this chain''s exporter',
												 a_variants, a_id);
					EXIT walk;
				ELSIF a_id < e.id THEN
					broken_event_id := a_id;
					problem := pg_catalog.format('event %s, anchored in ClickHouse at %s, is missing from the chain',
												 a_id, a_at);
					EXIT walk;
				ELSIF a_hash IS DISTINCT FROM e.hash OR a_events <> events_checked THEN
					broken_event_id := e.id;
					problem := pg_catalog.format('the chain up to event %s does not match its anchor of %s in ClickHouse (%s events, hash %s; the chain has %s events, hash %s): an event at or before it was changed, added or removed',
												 e.id, a_at, a_events, a_hash, events_checked, e.hash);
					EXIT walk;
				END IF;
				ok := true;
				FETCH v_anchors INTO a_id, a_hash, a_events, a_variants, a_at;
				v_more := FOUND;
			END LOOP;
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
		ELSIF v_more THEN
			-- Anchored events beyond the end of the chain (and its tip).
			anchors_checked := anchors_checked + 1;
			anchor_last_id := a_id;
			anchored_at := a_at;
			ok := false; broken_event_id := a_id;
			problem := CASE WHEN events_checked = 0
				THEN pg_catalog.format('the org has no audit events, but ClickHouse holds an anchor of %s events up to event %s (%s): they were removed',
									   a_events, a_id, a_at)
				ELSE pg_catalog.format('the chain ends at event %s, before its anchor of %s events up to event %s (%s): events were removed',
									   v_last, a_events, a_id, a_at) END;
		END IF;
	END walk;
	IF v_open THEN
		CLOSE v_anchors;
	END IF;
END
$$;
COMMENT ON FUNCTION agent.verify_audit_chain(uuid) IS
	'check an org''s audit hash chain, and its anchors in ClickHouse; reports the first broken event';

-- Append-only, for everyone including the owner, and ENABLE ALWAYS: a
-- session in session_replication_role = replica (which switches ordinary
-- triggers off) is refused too.  A superuser can still disable or drop a
-- trigger; verify_audit_chain() then shows what was changed, and the
-- anchors show it even when the chain was re-hashed (docs/security.md).
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
CREATE TRIGGER audit_heads_guard
	BEFORE INSERT OR UPDATE OR DELETE ON agent.audit_heads
	FOR EACH ROW EXECUTE FUNCTION agent._audit_heads_guard();
CREATE TRIGGER audit_heads_no_truncate
	BEFORE TRUNCATE ON agent.audit_heads
	FOR EACH STATEMENT EXECUTE FUNCTION agent._refuse_change();
ALTER TABLE agent.audit_events ENABLE ALWAYS TRIGGER audit_events_append_only;
ALTER TABLE agent.audit_events ENABLE ALWAYS TRIGGER audit_events_no_truncate;
ALTER TABLE agent.audit_heads ENABLE ALWAYS TRIGGER audit_heads_guard;
ALTER TABLE agent.audit_heads ENABLE ALWAYS TRIGGER audit_heads_no_truncate;
