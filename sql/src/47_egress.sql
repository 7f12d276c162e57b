-- Egress: outbound network of a run, limited to an allowlist (docs/egress.md).
-- Owns the policy as data (an org's rules and limits, narrowed per agent and
-- per conversation), the effective policy copied onto the invocation when
-- it is requested (frozen, shown on the card, bound to the approval), the
-- policy file the jail's proxy enforces, and the record of every connection
-- attempt (rows under RLS, a summary in the tool call, one audit event per
-- run with a hash of its connection log).
--
-- Semantics (stated once, here and in docs/egress.md):
--   * default deny: an org without rules has no network at all;
--   * a rule is a host pattern or a CIDR, with ports; "api.example.com"
--     matches that name only; "*.example.com" matches every name below
--     example.com, never example.com itself (the apex needs its own rule);
--     a CIDR rule admits IP-literal hosts in the range (names never match a
--     CIDR rule); the always-refused ranges (loopback, private, link-local,
--     metadata, CGNAT, multicast, reserved, ULA, ...) stay refused whatever
--     a rule says;
--   * an agent (and a conversation) may be narrowed to a subset of its
--     org's rules (agent.narrow_egress); without a narrowing it has all of
--     them; a conversation's narrowing selects from its agent's set; a
--     narrowing can never add a rule.

CREATE TABLE agent.egress_rules (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	org_id			uuid NOT NULL REFERENCES agent.orgs (id),
	host			text,
	cidr			cidr,
	ports			integer[] NOT NULL,
	created_by		text NOT NULL,
	created_at		timestamptz NOT NULL DEFAULT now(),
	CHECK ((host IS NULL) <> (cidr IS NULL)),
	CHECK (host IS NULL OR host ~ '^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$'
		   AND length(host) <= 253 AND host !~ '(^|\.)[0-9]+$' AND host !~ '(^|\.)0x'),
	CHECK (cardinality(ports) BETWEEN 1 AND 16 AND 1 <= ALL (ports) AND 65535 >= ALL (ports)),
	UNIQUE NULLS NOT DISTINCT (org_id, host, cidr)
);
COMMENT ON TABLE agent.egress_rules IS 'an org''s egress allowlist: host patterns or CIDRs with ports (docs/egress.md)';

-- Per-run limits of an org (defaults when it has no row).
CREATE TABLE agent.egress_limits (
	org_id			uuid PRIMARY KEY REFERENCES agent.orgs (id),
	max_connections integer NOT NULL DEFAULT 64 CHECK (max_connections BETWEEN 1 AND 10000),
	max_bytes_up	bigint NOT NULL DEFAULT 10485760 CHECK (max_bytes_up > 0),
	max_bytes_down	bigint NOT NULL DEFAULT 104857600 CHECK (max_bytes_down > 0)
);

-- A narrowing: the subset of the org's rules an agent (conversation_id
-- NULL) or one conversation of it may use.  rule_ids empty: no egress.
CREATE TABLE agent.egress_narrowing (
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid NOT NULL,
	conversation_id uuid,
	rule_ids		uuid[] NOT NULL,
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id),
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	UNIQUE NULLS NOT DISTINCT (agent_id, conversation_id)
);

-- On the invocation and its card (columns in 15_invocations.sql):
-- invocations.egress_policy, egress_sha256; approval_requests.approved_egress_sha256;
-- agent_tool_calls.egress.

-- The effective policy of a request: {"rules": [...], "limits": {...}}, or
-- NULL (no network).  Rules in a fixed order (host, cidr), so the same
-- policy always has the same text and hash.
CREATE FUNCTION agent._effective_egress(org uuid, agent_id uuid, conversation_id uuid)
	RETURNS jsonb
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v jsonb;
BEGIN
	-- An org without rules (most) has no network: no policy to build.
	IF NOT EXISTS (SELECT 1 FROM agent.egress_rules r WHERE r.org_id = org) THEN
		RETURN NULL;
	END IF;
	WITH a AS (SELECT n.rule_ids FROM agent.egress_narrowing n
				WHERE n.agent_id = _effective_egress.agent_id AND n.conversation_id IS NULL),
		 c AS (SELECT n.rule_ids FROM agent.egress_narrowing n
				WHERE n.agent_id = _effective_egress.agent_id
				  AND n.conversation_id = _effective_egress.conversation_id),
		 r AS (SELECT r.* FROM agent.egress_rules r
				WHERE r.org_id = org
				  AND (NOT EXISTS (SELECT 1 FROM a) OR EXISTS (SELECT 1 FROM a WHERE r.id = ANY (a.rule_ids)))
				  AND (NOT EXISTS (SELECT 1 FROM c) OR EXISTS (SELECT 1 FROM c WHERE r.id = ANY (c.rule_ids))))
	SELECT CASE WHEN count(*) = 0 THEN NULL ELSE
		jsonb_build_object(
			'rules', jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
						'id', r.id, 'host', r.host, 'cidr', r.cidr::text,
						'ports', (SELECT jsonb_agg(p ORDER BY p) FROM unnest(r.ports) p),
						-- the secrets the proxy puts into this rule's requests
						-- (48_secrets.sql); none: no key, the same text as before
						'secrets', agent._rule_secrets(r.id, agent_id)))
					 ORDER BY r.host NULLS LAST, r.cidr),
			'limits', (SELECT jsonb_build_object('connections', coalesce(l.max_connections, 64),
												 'bytes_up', coalesce(l.max_bytes_up, 10485760),
												 'bytes_down', coalesce(l.max_bytes_down, 104857600))
						 FROM (SELECT 1) x LEFT JOIN agent.egress_limits l ON l.org_id = org))
		END INTO v
	  FROM r;
	RETURN v;
END
$$;

-- agent.egress_may_reach(policy), what the card shows, is in
-- 15_invocations.sql: the card's view (28_approvals.sql) needs it.

CREATE FUNCTION agent._egress_sha256(policy jsonb) RETURNS text
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN CASE WHEN policy IS NULL THEN NULL
				ELSE pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(policy::text, 'UTF8')), 'hex') END;
END
$$;

-- Copied at request time; whoever inserts cannot supply their own.  An org
-- without rules (most) has no network: no policy, no hash (what
-- _effective_egress() and _egress_sha256() return then), without calling
-- them on every request.  In C (src/guards.c), as it runs on every request.
CREATE FUNCTION agent._invocations_egress() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_invocations_egress'
	LANGUAGE C;
CREATE TRIGGER invocations_egress
	BEFORE INSERT ON agent.invocations
	FOR EACH ROW EXECUTE FUNCTION agent._invocations_egress();

-- And never changed afterwards: a rule added after the approval does not
-- widen the approved run.
CREATE FUNCTION agent._invocations_freeze_egress() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	RAISE EXCEPTION 'cannot change the egress policy of invocation %', OLD.id
		USING ERRCODE = 'object_not_in_prerequisite_state',
			  DETAIL = 'The effective egress policy is fixed when the execution is requested and bound to its approval.',
			  HINT = 'Request a new execution to run under the current policy.';
END
$$;
CREATE TRIGGER invocations_freeze_egress
	BEFORE UPDATE OF egress_policy, egress_sha256 ON agent.invocations
	FOR EACH ROW WHEN ((OLD.egress_policy, OLD.egress_sha256) IS DISTINCT FROM
					   (NEW.egress_policy, NEW.egress_sha256))
	EXECUTE FUNCTION agent._invocations_freeze_egress();

-- ---- the admin's and the backend's API --------------------------------------

CREATE FUNCTION agent._egress_normalize_host(host text) RETURNS text
	LANGUAGE sql IMMUTABLE
	RETURN lower(regexp_replace(btrim(host), '\.$', ''));

-- Add a rule to the current org (agent_admin).  Exactly one of host and
-- cidr.  Returns the rule's id (an existing identical rule's, with its
-- ports replaced).
CREATE FUNCTION agent.add_egress_rule(host text, ports integer[], actor text, cidr cidr DEFAULT NULL)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_host	text;
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	v_host := agent._egress_normalize_host(host);
	-- The limit is the name's (253, as DNS has it): a full-length name
	-- written with the root's trailing dot, or with blanks around it, is
	-- that name.
	PERFORM agent._check_text(v_host, 'host', 'host');
	IF (v_host IS NULL) = (cidr IS NULL) THEN
		RAISE EXCEPTION 'an egress rule needs exactly one of host and cidr'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	-- (array_position() refuses a multidimensional array with 0A000: the
	-- dimensions first)
	IF ports IS NULL OR array_ndims(ports) IS DISTINCT FROM 1 THEN
		RAISE EXCEPTION 'invalid ports for an egress rule'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A rule lists 1 to 16 ports, each between 1 and 65535, in a one-dimensional array.';
	END IF;
	IF cardinality(ports) NOT BETWEEN 1 AND 16
	   OR NOT (1 <= ALL (ports) AND 65535 >= ALL (ports)) OR array_position(ports, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'invalid ports for an egress rule'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A rule lists 1 to 16 ports, each between 1 and 65535.';
	END IF;
	IF v_host IS NOT NULL AND (v_host !~ '^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$'
							   OR length(v_host) > 253) THEN
		RAISE EXCEPTION 'invalid host pattern "%"', agent._shown(host)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use a host name (api.example.com) or a wildcard (*.example.com, which does not match example.com itself).';
	END IF;
	IF v_host IS NOT NULL AND (v_host ~ '(^|\.)[0-9]+$' OR v_host ~ '(^|\.)0x') THEN
		RAISE EXCEPTION 'host pattern "%" is an address, not a name', agent._shown(host)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Allow addresses with a CIDR rule (cidr => ''203.0.113.7/32'').';
	END IF;
	UPDATE agent.egress_rules r
	   SET ports = (SELECT array_agg(DISTINCT p ORDER BY p) FROM unnest(ports) p)
	 WHERE r.org_id = agent.current_org() AND r.host IS NOT DISTINCT FROM v_host
	   AND r.cidr IS NOT DISTINCT FROM cidr
	RETURNING r.id INTO v_id;
	IF NOT FOUND THEN
		INSERT INTO agent.egress_rules AS r (org_id, host, cidr, ports, created_by)
		VALUES (agent.current_org(), v_host, cidr,
				(SELECT array_agg(DISTINCT p ORDER BY p) FROM unnest(ports) p), actor)
		RETURNING r.id INTO v_id;
	END IF;
	PERFORM agent._audit(agent.current_org(), NULL, 'egress.rule_set', NULL, actor,
						 jsonb_strip_nulls(jsonb_build_object('rule_id', v_id, 'host', v_host,
															  'cidr', cidr::text, 'ports', to_jsonb(ports))));
	-- (the event counts against the org's storage quota: 14_limits.sql)
	PERFORM agent._check_storage(agent.current_org(), 'the egress rule''s audit event');
	RETURN v_id;
END
$$;

CREATE FUNCTION agent.remove_egress_rule(rule uuid, actor text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	DELETE FROM agent.egress_rules r WHERE r.id = rule AND r.org_id = agent.current_org();
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM agent._audit(agent.current_org(), NULL, 'egress.rule_removed', NULL, actor,
						 jsonb_build_object('rule_id', rule));
	RETURN true;
END
$$;

CREATE FUNCTION agent.set_egress_limits(max_connections integer, max_bytes_up bigint,
										max_bytes_down bigint, actor text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	IF max_connections IS NULL OR max_bytes_up IS NULL OR max_bytes_down IS NULL
	   OR max_connections NOT BETWEEN 1 AND 10000 OR max_bytes_up <= 0 OR max_bytes_down <= 0 THEN
		RAISE EXCEPTION 'invalid egress limits'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Connections per run are 1 to 10000; byte limits are positive.';
	END IF;
	INSERT INTO agent.egress_limits AS l VALUES (agent.current_org(), max_connections, max_bytes_up, max_bytes_down)
	ON CONFLICT (org_id) DO UPDATE
		SET max_connections = EXCLUDED.max_connections, max_bytes_up = EXCLUDED.max_bytes_up,
			max_bytes_down = EXCLUDED.max_bytes_down;
	PERFORM agent._audit(agent.current_org(), NULL, 'egress.limits_set', NULL, actor,
						 jsonb_build_object('max_connections', max_connections,
											'max_bytes_up', max_bytes_up, 'max_bytes_down', max_bytes_down));
	PERFORM agent._check_storage(agent.current_org(), 'the egress limits'' audit event');
END
$$;

-- Narrow an agent (conversation NULL) or one of its conversations to a
-- subset of what it has now: rules is a list of rule ids of the org; a
-- rule its agent does not have is refused, so a narrowing can only take
-- away.  rules NULL removes the narrowing (the conversation gets its
-- agent's set; the agent the org's).  An agent's narrowing is org policy,
-- the admin's (agent_admin; a backend gets 42501: it could otherwise
-- remove or widen what an admin took away); a conversation's is the
-- backend's or the admin's, and only selects from its agent's set (so a
-- backend can narrow within what the admin left, never beyond it).  The
-- admin's tenant needs no workspace: the agent is looked up in the org.
CREATE FUNCTION agent.narrow_egress(agent uuid, conversation uuid, rules uuid[], actor text)
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	g		agent.agents;
	v_have	jsonb;
	v_bad	uuid;
	v_caller name := agent._outer_role();	-- the role outside this function
	v_admin	boolean;
BEGIN
	v_admin := pg_catalog.pg_has_role(v_caller, 'agent_admin', 'USAGE')
		OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = v_caller);
	PERFORM agent._require_tenant(NOT v_admin);
	PERFORM agent._require_person(actor, 'actor');
	IF conversation IS NULL AND NOT v_admin THEN
		RAISE EXCEPTION 'only an admin can narrow an agent''s egress'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = 'An agent''s narrowing is org policy (agent_admin).',
				  HINT = 'Narrow one conversation instead: agent.narrow_egress(agent, conversation, rules, actor), within its agent''s rules.';
	END IF;
	SELECT * INTO g FROM agent.agents a
	 WHERE a.id = agent AND a.org_id = agent.current_org()
	   AND (a.workspace_id = agent.current_workspace()
			OR (v_admin AND agent.current_workspace() IS NULL));
	IF NOT FOUND THEN
		RAISE EXCEPTION 'agent % does not exist', agent USING ERRCODE = 'no_data_found';
	END IF;
	IF conversation IS NOT NULL AND NOT EXISTS (
		SELECT 1 FROM agent.conversations c WHERE c.id = conversation AND c.agent_id = g.id
		   AND c.org_id = g.org_id AND c.workspace_id = g.workspace_id) THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation USING ERRCODE = 'no_data_found';
	END IF;
	IF rules IS NULL THEN
		DELETE FROM agent.egress_narrowing n
		 WHERE n.agent_id = g.id AND n.conversation_id IS NOT DISTINCT FROM conversation;
	ELSE
		-- what it may choose from: its agent's set (a conversation) or the org's
		v_have := agent._effective_egress(g.org_id, g.id, NULL);
		IF conversation IS NULL THEN
			v_have := (SELECT jsonb_build_object('rules', jsonb_agg(jsonb_build_object('id', r.id)))
						 FROM agent.egress_rules r WHERE r.org_id = g.org_id);
		END IF;
		SELECT x INTO v_bad FROM unnest(rules) x
		 WHERE x IS NULL OR NOT EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(v_have->'rules', '[]')) e
										 WHERE (e->>'id')::uuid = x)
		 LIMIT 1;
		IF FOUND THEN
			RAISE EXCEPTION 'egress rule % is not available to narrow to', v_bad
				USING ERRCODE = 'insufficient_privilege',
					  DETAIL = 'A narrowing selects from the rules its agent (or, for an agent, its org) already has; it cannot add one.';
		END IF;
		INSERT INTO agent.egress_narrowing AS n (org_id, workspace_id, agent_id, conversation_id, rule_ids, set_by)
		VALUES (g.org_id, g.workspace_id, g.id, conversation,
				(SELECT coalesce(array_agg(DISTINCT x ORDER BY x), '{}') FROM unnest(rules) x), actor)
		ON CONFLICT (agent_id, conversation_id) DO UPDATE
			SET rule_ids = EXCLUDED.rule_ids, set_by = EXCLUDED.set_by, set_at = now();
	END IF;
	PERFORM agent._audit(g.org_id, g.workspace_id, 'egress.narrowed', NULL, actor,
						 jsonb_build_object('agent_id', g.id, 'conversation_id', conversation,
											'rule_ids', to_jsonb(rules)));
END
$$;

-- What a run of this agent/conversation would be allowed to reach now.
CREATE FUNCTION agent.effective_egress(agent uuid, conversation uuid DEFAULT NULL)
	RETURNS TABLE (may_reach text, policy jsonb)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	g	agent.agents;
BEGIN
	PERFORM agent._require_tenant(true);
	SELECT * INTO g FROM agent.agents a
	 WHERE a.id = agent AND a.org_id = agent.current_org() AND a.workspace_id = agent.current_workspace();
	IF NOT FOUND THEN
		RAISE EXCEPTION 'agent % does not exist', agent USING ERRCODE = 'no_data_found';
	END IF;
	policy := agent._effective_egress(g.org_id, g.id, conversation);
	may_reach := agent.egress_may_reach(policy);
	RETURN NEXT;
END
$$;

-- ---- the run: the policy file, and what happened --------------------------------

-- The file the jail hands its proxy (src/egress/policy.c), from the
-- invocation's frozen copy; NULL: the run has no network.  Refuses a copy
-- whose hash is not the one its approval was bound to (a rewrite of the
-- invocation after approval, by someone able to bypass the freeze).
CREATE FUNCTION agent._egress_policy_file(invocation uuid) RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r		record;
	e		jsonb;
	v		text;
BEGIN
	SELECT i.egress_policy, i.egress_sha256, a.approved_egress_sha256, a.status
	  INTO r
	  FROM agent.invocations i JOIN agent.approval_requests a ON a.invocation_id = i.id
	 WHERE i.id = invocation;
	IF NOT FOUND OR r.egress_policy IS NULL THEN
		RETURN NULL;
	END IF;
	IF r.status <> 'approved' OR r.approved_egress_sha256 IS DISTINCT FROM r.egress_sha256
	   OR r.egress_sha256 IS DISTINCT FROM agent._egress_sha256(r.egress_policy) THEN
		RAISE EXCEPTION 'the egress policy of invocation % is not the one its approval covers', invocation
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	v := E'sandbox-egress/1\n'
		|| format(E'limit connections %s\nlimit bytes_up %s\nlimit bytes_down %s\n',
				  (r.egress_policy->'limits'->>'connections')::bigint,
				  (r.egress_policy->'limits'->>'bytes_up')::bigint,
				  (r.egress_policy->'limits'->>'bytes_down')::bigint);
	FOR e IN SELECT x FROM jsonb_array_elements(r.egress_policy->'rules') x LOOP
		v := v || format(E'rule %s %s %s %s\n', (e->>'id')::uuid,
						 CASE WHEN e ? 'host' THEN 'host' ELSE 'cidr' END,
						 coalesce(e->>'host', (e->>'cidr')::cidr::text),
						 (SELECT string_agg(p::integer::text, ',') FROM jsonb_array_elements_text(e->'ports') p));
	END LOOP;
	RETURN v;
END
$$;

-- One run's egress, from the jail: the summary (the verdict's egress_*
-- fields) and every logged attempt (the proxy's JSON lines).
CREATE TABLE agent.egress_runs (
	invocation_id	uuid PRIMARY KEY REFERENCES agent.invocations (id),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	attempts		bigint NOT NULL,
	allowed			bigint NOT NULL,
	denied			bigint NOT NULL,
	bytes_up		bigint NOT NULL,
	bytes_down		bigint NOT NULL,
	limit_hit		boolean NOT NULL,
	log_rows		integer NOT NULL,
	log_sha256		text NOT NULL,
	recorded_at		timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent.egress_connections (
	invocation_id	uuid NOT NULL REFERENCES agent.invocations (id),
	seq				integer NOT NULL,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	kind			text NOT NULL,		-- connect | http
	host			text NOT NULL,
	port			integer NOT NULL,
	address			inet,
	allowed			boolean NOT NULL,
	rule_id			uuid,
	reason			text,
	bytes_up		bigint NOT NULL,
	bytes_down		bigint NOT NULL,
	duration_ms		bigint NOT NULL,
	created_at		timestamptz NOT NULL DEFAULT now(),
	secret			text,				-- the secret put in, or whose placeholder was blocked (48_secrets.sql)
	PRIMARY KEY (invocation_id, seq)
);
CREATE INDEX egress_connections_tenant_idx ON agent.egress_connections (org_id, workspace_id);
COMMENT ON TABLE agent.egress_connections IS 'every connection attempt of a run through its egress proxy (docs/egress.md)';

-- The hash of a run's connection log: sha256 over its rows in order, each
-- as the JSON object below and a newline.  The run's audit event carries
-- it; anyone who can read the rows recomputes it (docs/egress.md, "Audit").
-- A row with a secret has that key too (a row without one is hashed as
-- before secrets existed).
CREATE FUNCTION agent.egress_log_sha256(invocation uuid) RETURNS text
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT encode(sha256(convert_to(coalesce(string_agg((jsonb_build_object(
				'seq', c.seq, 'kind', c.kind, 'host', c.host, 'port', c.port,
				'address', host(c.address), 'allowed', c.allowed, 'rule_id', c.rule_id,
				'reason', c.reason, 'bytes_up', c.bytes_up, 'bytes_down', c.bytes_down,
				'duration_ms', c.duration_ms)
				|| CASE WHEN c.secret IS NULL THEN '{}'::jsonb
						ELSE jsonb_build_object('secret', c.secret) END)::text || E'\n', '' ORDER BY c.seq), ''), 'UTF8')), 'hex')
	  FROM agent.egress_connections c WHERE c.invocation_id = invocation
$$;

-- The run's connection log as the supervisor read it from the jail, with
-- the verdict's summary.  Fenced: once per invocation, only while it is
-- provisioning or running, only for an invocation with egress.  The
-- hash covers the log's rows in order (docs/egress.md, "Audit").
CREATE FUNCTION agent._record_egress(invocation uuid, log text, verdict jsonb) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r		agent.invocations;
	l		text;
	j		jsonb;
	n		integer := 0;
BEGIN
	SELECT * INTO r FROM agent.invocations i
	 WHERE i.id = invocation AND i.state IN ('provisioning', 'running') AND i.egress_policy IS NOT NULL;
	IF NOT FOUND OR EXISTS (SELECT 1 FROM agent.egress_runs e WHERE e.invocation_id = invocation) THEN
		RETURN false;
	END IF;
	FOR l IN SELECT x FROM regexp_split_to_table(coalesce(log, ''), E'\n') x WHERE x <> '' LOOP
		n := n + 1;
		EXIT WHEN n > 1000;		-- the proxy logs at most 1000 per run
		BEGIN
			j := l::jsonb;
			INSERT INTO agent.egress_connections
				(invocation_id, seq, org_id, workspace_id, kind, host, port, address, allowed,
				 rule_id, reason, bytes_up, bytes_down, duration_ms, secret)
			VALUES (invocation, n, r.org_id, r.workspace_id,
					CASE WHEN j->>'kind' = 'http' THEN 'http' ELSE 'connect' END,
					left(coalesce(j->>'host', '?'), 300), coalesce((j->>'port')::integer, 0),
					(j->>'address')::inet, j->>'decision' = 'allowed',
					CASE WHEN (j->>'rule') ~ '^[0-9a-f-]{36}$' THEN (j->>'rule')::uuid END,
					left(j->>'reason', 1000), coalesce((j->>'bytes_up')::bigint, 0),
					coalesce((j->>'bytes_down')::bigint, 0), coalesce((j->>'ms')::bigint, 0),
					left(j->>'secret', 64));
		EXCEPTION WHEN data_exception THEN
			-- a line of ours we cannot read must not lose the run's record
			INSERT INTO agent.egress_connections
				(invocation_id, seq, org_id, workspace_id, kind, host, port, allowed, reason,
				 bytes_up, bytes_down, duration_ms)
			VALUES (invocation, n, r.org_id, r.workspace_id, 'connect', '(unreadable log line)', 0,
					false, 'the proxy wrote a line that could not be read', 0, 0, 0);
		END;
	END LOOP;
	INSERT INTO agent.egress_runs
		(invocation_id, org_id, workspace_id, attempts, allowed, denied, bytes_up, bytes_down,
		 limit_hit, log_rows, log_sha256)
	VALUES (invocation, r.org_id, r.workspace_id,
			coalesce((verdict->>'egress_attempts')::bigint, 0),
			coalesce((verdict->>'egress_allowed')::bigint, 0),
			coalesce((verdict->>'egress_denied')::bigint, 0),
			coalesce((verdict->>'egress_bytes_up')::bigint, 0),
			coalesce((verdict->>'egress_bytes_down')::bigint, 0),
			coalesce((verdict->>'egress_limit_hit')::boolean, false),
			least(n, 1000), agent.egress_log_sha256(invocation));
	RETURN true;
END
$$;

-- The tool call carries the run's egress summary, and the finish (the
-- transaction that writes the tool call) appends the run's one egress
-- audit event: the counts and the hash of its connection log.
CREATE FUNCTION agent._tool_call_egress() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	e		agent.egress_runs;
	v_pol	jsonb;
BEGIN
	SELECT i.egress_policy INTO v_pol FROM agent.invocations i WHERE i.id = NEW.invocation_id;
	IF v_pol IS NULL THEN
		RETURN NEW;
	END IF;
	SELECT * INTO e FROM agent.egress_runs x WHERE x.invocation_id = NEW.invocation_id;
	NEW.egress := jsonb_build_object(
		'may_reach', agent.egress_may_reach(v_pol),
		'attempts', coalesce(e.attempts, 0), 'allowed', coalesce(e.allowed, 0),
		'denied', coalesce(e.denied, 0), 'bytes_up', coalesce(e.bytes_up, 0),
		'bytes_down', coalesce(e.bytes_down, 0), 'limit_hit', coalesce(e.limit_hit, false),
		'recorded', e.invocation_id IS NOT NULL);
	PERFORM agent._audit(NEW.org_id, NEW.workspace_id, 'egress.connections', NEW.invocation_id,
						 'system', NEW.egress || jsonb_build_object(
							'egress_sha256', (SELECT i.egress_sha256 FROM agent.invocations i WHERE i.id = NEW.invocation_id),
							'log_rows', coalesce(e.log_rows, 0), 'log_sha256', e.log_sha256));
	RETURN NEW;
END
$$;
CREATE TRIGGER agent_tool_calls_egress
	BEFORE INSERT ON agent.agent_tool_calls
	FOR EACH ROW EXECUTE FUNCTION agent._tool_call_egress();

-- Product data: in a pg_dump of the database (docs/operations.md, when on
-- main: "Backup and restore").
SELECT pg_catalog.pg_extension_config_dump('agent.egress_rules', '');
SELECT pg_catalog.pg_extension_config_dump('agent.egress_limits', '');
SELECT pg_catalog.pg_extension_config_dump('agent.egress_narrowing', '');
SELECT pg_catalog.pg_extension_config_dump('agent.egress_runs', '');
SELECT pg_catalog.pg_extension_config_dump('agent.egress_connections', '');

-- ---- privileges and row-level security -----------------------------------------
ALTER TABLE agent.egress_rules ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.egress_limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.egress_narrowing ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.egress_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.egress_connections ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_org ON agent.egress_rules FOR SELECT TO agent_backend, agent_admin
	USING (org_id = agent.current_org());
CREATE POLICY tenant_org ON agent.egress_limits FOR SELECT TO agent_backend, agent_admin
	USING (org_id = agent.current_org());
CREATE POLICY backend_workspace ON agent.egress_narrowing FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.egress_runs FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.egress_connections FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY auditor_read ON agent.egress_rules FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.egress_limits FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.egress_narrowing FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.egress_runs FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.egress_connections FOR SELECT TO agent_auditor USING (true);
GRANT SELECT ON agent.egress_rules, agent.egress_limits TO agent_backend, agent_admin;
GRANT SELECT ON agent.egress_narrowing, agent.egress_runs, agent.egress_connections TO agent_backend;
GRANT SELECT ON agent.egress_rules, agent.egress_limits, agent.egress_narrowing,
	agent.egress_runs, agent.egress_connections TO agent_auditor;
GRANT EXECUTE ON FUNCTION
	agent.add_egress_rule(text, integer[], text, cidr),
	agent.remove_egress_rule(uuid, text),
	agent.set_egress_limits(integer, bigint, bigint, text)
	TO agent_admin;
GRANT EXECUTE ON FUNCTION
	agent.narrow_egress(uuid, uuid, uuid[], text),
	agent.effective_egress(uuid, uuid),
	agent.egress_may_reach(jsonb),
	agent.egress_log_sha256(uuid)
	TO agent_backend, agent_admin;
GRANT EXECUTE ON FUNCTION agent.egress_log_sha256(uuid) TO agent_auditor;

-- A runner host's way to record a run's egress (docs/runners.md): the same
-- step, fenced on the runner's identity and its lease of the invocation.
CREATE FUNCTION agent.runner_record_egress(runner uuid, token uuid, invocation uuid,
										   log text, verdict jsonb) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN agent._record_egress(invocation, log, verdict);
END
$$;
GRANT EXECUTE ON FUNCTION agent.runner_record_egress(uuid, uuid, uuid, text, jsonb) TO agent_runner;
