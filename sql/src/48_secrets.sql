-- Secrets (docs/secrets.md): credentials a run's sandbox never sees.  Owns
-- the runner hosts' public keys (the operator's), an org's secrets (the
-- admin's: each bound to one host rule of the org's egress allowlist and
-- one request header, optionally narrowed to some agents, stored sealed),
-- what a run's prepare step hands its runner, and the audit events of their
-- use.
--
-- The database never holds a value.  The admin's tool (sandbox-secret, in
-- src/runner) seals it with libsodium's crypto_box_seal to the runner
-- hosts' public key; only a runner host, which holds the private key in a
-- file of its own, can open it, and only to hand it to the run's egress
-- proxy, which puts it into the bound header of requests to the bound host
-- in place of a per-run placeholder (the sandbox's environment variable).
-- What is sealed binds the value to its org, name, host pattern and header
-- (secret_box.c, the one definition): a ciphertext moved to another
-- secret, org, host or header does not open there.
--
-- On the run: the secrets of a request's rules are part of its effective
-- egress policy (agent._effective_egress, 47_egress.sql: each host rule
-- carries "secrets": [{id, name, header}]), so the card shows them
-- ("secret GITHUB_TOKEN → api.github.com:443", agent.egress_may_reach) and
-- the approval binds them with the policy's hash.  The prepare step gives
-- the runner each one's sealed box (agent._secrets_to_place); every use and
-- every blocked placeholder is a connection-log row (egress_connections.
-- secret) and an audit event (secret.used, secret.blocked) in the finish's
-- transaction.
--
-- Which runner runs it: each runner reports the ids of the keys its key
-- file holds (agent.runner_report_secret_keys, at registration and
-- whenever the file changed); a run with secrets is claimed only by a
-- runner that reported every key its secrets are sealed to
-- (agent._secrets_claimable, the claim's one call), and while none live
-- does, agent.queue_status() says so (agent._secrets_wait).

-- ---- the runner hosts' keys (the operator's) ------------------------------------

-- One X25519 public key per row; the newest one not retired is the one
-- admins seal to.  key_id: the first 16 hex digits of its sha256 (what the
-- tool prints and a runner host matches its private keys by).
CREATE TABLE agent.secret_keys (
	key_id			text PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{16}$'),
	public_key		bytea NOT NULL UNIQUE CHECK (octet_length(public_key) = 32),
	added_by		text NOT NULL,
	added_at		timestamptz NOT NULL DEFAULT now(),
	retired_at		timestamptz,
	CHECK (key_id = left(encode(sha256(public_key), 'hex'), 16))
);
COMMENT ON TABLE agent.secret_keys IS
	'the runner hosts'' public keys that secrets are sealed to (docs/secrets.md)';

-- ---- an org's secrets (the admin's) ---------------------------------------------

-- sealed: crypto_box_seal of the message secret_box.c defines (org, name,
-- host pattern, header, value), to the key key_id.
CREATE TABLE agent.secrets (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	org_id			uuid NOT NULL REFERENCES agent.orgs (id),
	name			text NOT NULL CHECK (name ~ '^[A-Z][A-Z0-9_]{0,63}$'),
	rule_id			uuid NOT NULL REFERENCES agent.egress_rules (id),
	header			text NOT NULL,
	agent_ids		uuid[],			-- NULL: every agent of the org
	key_id			text NOT NULL REFERENCES agent.secret_keys (key_id),
	sealed			bytea NOT NULL CHECK (octet_length(sealed) BETWEEN 49 AND 16384),
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT secrets_org_name UNIQUE (org_id, name)
);
CREATE INDEX secrets_rule_idx ON agent.secrets (rule_id);

-- The keys each runner holds, as it last reported them (ids only; any
-- well-formed id: a key may be deployed before it is added).
CREATE TABLE agent.runner_secret_keys (
	runner_id		uuid NOT NULL REFERENCES agent.runners (id),
	key_id			text NOT NULL CHECK (key_id ~ '^[0-9a-f]{16}$'),
	reported_at		timestamptz NOT NULL DEFAULT now(),	-- first, by this runner
	PRIMARY KEY (runner_id, key_id)
);
COMMENT ON TABLE agent.runner_secret_keys IS
	'the secrets keys each runner holds (their ids), as it last reported them';
CREATE INDEX runner_secret_keys_key_idx ON agent.runner_secret_keys (key_id);
COMMENT ON TABLE agent.secrets IS
	'an org''s secrets, sealed to the runner hosts'' key, each bound to a host rule and a header (docs/secrets.md)';

-- The message a secret's sealed box holds before its value, as
-- secret_box.c (secret_box_binding) writes it: a version line, then each
-- field as "<tag> <length>:<bytes>\n".  Only its length is used here (the
-- database cannot open the box): a box sealed for another name, host or
-- header is usually of another size, and is refused before a run finds out.
CREATE FUNCTION agent._secret_binding(org uuid, name text, host text, header text) RETURNS text
	LANGUAGE sql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT E'sandbox-secret/1\n' || string_agg(f.tag || ' ' || octet_length(f.v) || ':' || f.v || E'\n', '' ORDER BY f.o)
	  FROM (VALUES (1, 'org', org::text), (2, 'name', name), (3, 'host', host), (4, 'header', header)) AS f(o, tag, v)
$$;

-- The bounds of a value (secret_box.h): at least 8 bytes, so that the
-- proxy's scrubbing of responses cannot mistake common bytes for it; at
-- most 4096.
CREATE FUNCTION agent._secret_value_bounds(OUT min_bytes integer, OUT max_bytes integer)
	LANGUAGE sql IMMUTABLE
	AS $$ SELECT 8, 4096 $$;

-- Names a secret's environment variable may not take: the sandbox's own
-- (the jail sets them) and those that change how a program runs.
CREATE FUNCTION agent._secret_name_reserved(name text) RETURNS boolean
	LANGUAGE sql IMMUTABLE
	RETURN name IN ('PATH', 'HOME', 'TMPDIR', 'USER', 'LOGNAME', 'SHELL', 'TERM', 'LANG',
					'MPLCONFIGDIR', 'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'ALL_PROXY',
					'SSL_CERT_FILE', 'SSL_CERT_DIR', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE',
					'IFS', 'ENV', 'BASH_ENV', 'PS4', 'PROMPT_COMMAND')
		OR name ~ '^(LD_|PYTHON|PIP_|NODE_|NPM_|LC_|SANDBOX_|BASH_FUNC)';

-- A list of agents as stored: sorted, each once; NULL stays NULL (every
-- agent), '{}' stays '{}' (none).
CREATE FUNCTION agent._secret_agents(agents uuid[]) RETURNS uuid[]
	LANGUAGE sql IMMUTABLE
	RETURN CASE WHEN agents IS NULL THEN NULL
				ELSE coalesce((SELECT array_agg(DISTINCT x ORDER BY x) FROM unnest(agents) x), '{}') END;

-- The header a secret goes in: "Name: template", the template holding "{}"
-- (the value's place) exactly once.  A field name is a token; the template
-- visible ASCII and spaces, no leading or trailing blank (a parser would
-- drop it).  Fields that frame or route a request are not for secrets.
CREATE FUNCTION agent._secret_check_header(header text) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_name	text;
	v_tmpl	text;
BEGIN
	IF header IS NULL THEN
		RAISE EXCEPTION 'header must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	v_name := substring(header FROM '^([!#$%&''*+.^_`|~0-9A-Za-z-]{1,64}): ');
	v_tmpl := substring(header FROM '^[^:]*: (.*)$');
	IF v_name IS NULL OR v_tmpl IS NULL OR octet_length(header) > 256
	   OR v_tmpl !~ '^[ -~]*$' OR v_tmpl ~ '^[ ]|[ ]$'
	   OR (octet_length(v_tmpl) - octet_length(replace(v_tmpl, '{}', ''))) <> 2 THEN
		RAISE EXCEPTION 'invalid secret header "%"', agent._shown(header)
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A secret''s header is "Name: template": a field name, a colon and one space, then at most 256 bytes of visible ASCII and spaces holding "{}" (where the value goes) exactly once.',
				  HINT = 'For example ''Authorization: Bearer {}''.';
	END IF;
	IF lower(v_name) IN ('host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive',
						 'te', 'trailer', 'upgrade', 'expect', 'accept-encoding')
	   OR lower(v_name) LIKE 'proxy-%' THEN
		RAISE EXCEPTION 'header % cannot carry a secret', v_name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'It frames or routes the request, or is the proxy''s own.';
	END IF;
END
$$;

-- ---- the operator's API -----------------------------------------------------------

-- Register a public key of the runner hosts (base64 of 32 bytes, as
-- `sandbox-secret keygen` prints it); it becomes the one admins seal to.
-- Returns its key id; a key registered already returns its id (a retired
-- one is refused: its private key may be gone from the hosts).
CREATE FUNCTION agent.add_secret_key(public_key text, actor text) RETURNS text
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_key	bytea;
	v_id	text;
	v_old	agent.secret_keys;
BEGIN
	PERFORM agent._require_person(actor, 'actor');
	IF public_key IS NULL THEN
		RAISE EXCEPTION 'public_key must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	BEGIN
		v_key := decode(btrim(public_key), 'base64');
	EXCEPTION WHEN invalid_parameter_value THEN
		v_key := NULL;
	END;
	IF v_key IS NULL OR octet_length(v_key) <> 32 THEN
		RAISE EXCEPTION 'invalid public key for secrets'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A key is the base64 of 32 bytes (an X25519 public key).',
				  HINT = 'Use the line `sandbox-secret keygen` printed.';
	END IF;
	v_id := left(encode(sha256(v_key), 'hex'), 16);
	SELECT * INTO v_old FROM agent.secret_keys k WHERE k.key_id = v_id;
	IF FOUND AND v_old.retired_at IS NOT NULL THEN
		RAISE EXCEPTION 'secret key % was retired', v_id
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Make a new key pair with `sandbox-secret keygen`.';
	END IF;
	IF NOT FOUND THEN
		INSERT INTO agent.secret_keys (key_id, public_key, added_by) VALUES (v_id, v_key, actor);
	END IF;
	RETURN v_id;
END
$$;

-- Retire a key: no secret may be sealed to it any more.  Refused while a
-- secret still is (55000, with how many): those are sealed again to the
-- current key first (docs/secrets.md, "Rotation").
CREATE FUNCTION agent.retire_secret_key(key_id text, actor text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	n	bigint;
BEGIN
	PERFORM agent._require_person(actor, 'actor');
	PERFORM 1 FROM agent.secret_keys k WHERE k.key_id = key_id FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'secret key % does not exist', agent._shown(key_id) USING ERRCODE = 'no_data_found';
	END IF;
	SELECT count(*) INTO n FROM agent.secrets s WHERE s.key_id = key_id;
	IF n > 0 THEN
		RAISE EXCEPTION 'secret key % still seals % secrets', key_id, n
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Their admins seal them again to the current key (agent.set_secret); agent.secret_key_status says how many are left.';
	END IF;
	UPDATE agent.secret_keys k SET retired_at = coalesce(k.retired_at, now()) WHERE k.key_id = key_id;
	RETURN true;
END
$$;

-- Each key, whether admins seal to it now, and how many secrets it seals.
CREATE VIEW agent.secret_key_status AS
SELECT k.key_id, translate(encode(k.public_key, 'base64'), E'\n', '') AS public_key,
	   k.added_by, k.added_at, k.retired_at,
	   k.key_id = (SELECT c.key_id FROM agent.secret_keys c WHERE c.retired_at IS NULL
				   ORDER BY c.added_at DESC, c.key_id LIMIT 1) AS current,
	   (SELECT count(*) FROM agent.secrets s WHERE s.key_id = k.key_id) AS secrets,
	   (SELECT count(*) FROM agent.runner_secret_keys rk JOIN agent.runners rn ON rn.id = rk.runner_id
		 WHERE rk.key_id = k.key_id AND rn.state = 'active'
		   AND rn.last_heartbeat >= now() - agent._runner_lease()) AS live_runners
  FROM agent.secret_keys k;
COMMENT ON VIEW agent.secret_key_status IS
	'the runner hosts'' keys for secrets: which one is current, how many secrets each seals, how many live runners hold it';

-- ---- the admin's API --------------------------------------------------------------

-- The key to seal to now, with what the admin's tool needs besides the
-- value: `sandbox-secret seal` takes these.
CREATE FUNCTION agent.secrets_public_key(OUT key_id text, OUT public_key text, OUT org_id uuid)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._require_tenant(false);
	SELECT k.key_id, translate(encode(k.public_key, 'base64'), E'\n', '')
	  INTO key_id, public_key
	  FROM agent.secret_keys k WHERE k.retired_at IS NULL
	 ORDER BY k.added_at DESC, k.key_id LIMIT 1;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'no key for secrets has been added'
			USING ERRCODE = 'no_data_found',
				  HINT = 'The operator registers the runner hosts'' public key with agent.add_secret_key().';
	END IF;
	org_id := agent.current_org();
END
$$;

-- Store (or replace) a secret of the current org: its name (the sandbox's
-- environment variable), the host rule it is bound to, the header it goes
-- in, the value sealed by `sandbox-secret seal` ("sealed:1:KEY_ID:BASE64"),
-- and optionally the agents that may use it (NULL: all).  Returns its id.
CREATE FUNCTION agent.set_secret(name text, rule uuid, header text, sealed text, actor text,
								 agents uuid[] DEFAULT NULL) RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_org	uuid;
	v_rule	agent.egress_rules;
	v_parts text[];
	v_key	agent.secret_keys;
	v_box	bytea;
	v_min	integer;
	v_max	integer;
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	v_org := agent.current_org();
	IF name IS NULL OR rule IS NULL OR sealed IS NULL THEN
		RAISE EXCEPTION 'name, rule and sealed must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF name !~ '^[A-Z][A-Z0-9_]{0,63}$' THEN
		RAISE EXCEPTION 'invalid secret name "%"', agent._shown(name)
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A secret''s name is the sandbox''s environment variable: an upper-case letter, then up to 63 upper-case letters, digits and underscores.';
	END IF;
	IF agent._secret_name_reserved(name) THEN
		RAISE EXCEPTION 'secret name % is reserved', name
			USING ERRCODE = 'reserved_name',
				  DETAIL = 'The sandbox sets this variable itself, or it changes how programs run.';
	END IF;
	PERFORM agent._secret_check_header(header);
	SELECT * INTO v_rule FROM agent.egress_rules r WHERE r.id = rule AND r.org_id = v_org;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'egress rule % does not exist', rule USING ERRCODE = 'no_data_found';
	END IF;
	IF v_rule.host IS NULL THEN
		RAISE EXCEPTION 'a secret needs a host rule'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'The proxy puts a secret only into TLS connections whose server it verifies by name; a CIDR rule admits addresses.';
	END IF;
	IF agents IS NOT NULL AND EXISTS (
		SELECT 1 FROM unnest(agents) x
		 WHERE x IS NULL OR NOT EXISTS (SELECT 1 FROM agent.agents a WHERE a.id = x AND a.org_id = v_org)) THEN
		RAISE EXCEPTION 'agent % does not exist',
			(SELECT x FROM unnest(agents) x
			  WHERE x IS NULL OR NOT EXISTS (SELECT 1 FROM agent.agents a WHERE a.id = x AND a.org_id = v_org)
			  LIMIT 1)
			USING ERRCODE = 'no_data_found';
	END IF;
	-- "sealed:1:KEY_ID:BASE64", as the tool prints it
	v_parts := regexp_match(btrim(sealed), '^sealed:1:([0-9a-f]{16}):([A-Za-z0-9+/=]+)$');
	IF v_parts IS NOT NULL THEN
		BEGIN
			v_box := decode(v_parts[2], 'base64');
		EXCEPTION WHEN invalid_parameter_value THEN
			v_box := NULL;
		END;
	END IF;
	IF v_box IS NULL THEN
		RAISE EXCEPTION 'invalid sealed secret'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A sealed secret is what `sandbox-secret seal` prints: sealed:1:KEY_ID:BASE64.';
	END IF;
	SELECT * INTO v_key FROM agent.secret_keys k WHERE k.key_id = v_parts[1];
	IF NOT FOUND OR v_key.retired_at IS NOT NULL THEN
		RAISE EXCEPTION 'secret key % is not one the runner hosts hold', v_parts[1]
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Seal the value to the key agent.secrets_public_key() returns.';
	END IF;
	-- The box holds the binding and the value, and crypto_box_seal adds 48
	-- bytes: a size outside these bounds was sealed for another binding.
	SELECT b.min_bytes, b.max_bytes INTO v_min, v_max FROM agent._secret_value_bounds() b;
	IF octet_length(v_box) NOT BETWEEN
		   48 + octet_length(agent._secret_binding(v_org, name, v_rule.host, header)) + length('value ' || v_min || ':' || E'\n') + v_min
	   AND 48 + octet_length(agent._secret_binding(v_org, name, v_rule.host, header)) + length('value ' || v_max || ':' || E'\n') + v_max THEN
		RAISE EXCEPTION 'sealed secret does not fit secret %', name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = pg_catalog.format('It was sealed for another org, name, host or header, or its value is not %s to %s bytes.', v_min, v_max),
				  HINT = pg_catalog.format('Seal it with: sandbox-secret seal --key KEY --org %s --name %s --host ''%s'' --header ''%s''.',
										   v_org, name, v_rule.host, header);
	END IF;
	INSERT INTO agent.secrets AS s (org_id, name, rule_id, header, agent_ids, key_id, sealed, set_by)
	VALUES (v_org, name, v_rule.id, header, agent._secret_agents(agents), v_key.key_id, v_box, actor)
	ON CONFLICT ON CONSTRAINT secrets_org_name DO UPDATE
		SET rule_id = EXCLUDED.rule_id, header = EXCLUDED.header, agent_ids = EXCLUDED.agent_ids,
			key_id = EXCLUDED.key_id, sealed = EXCLUDED.sealed, set_by = EXCLUDED.set_by,
			set_at = now()
	RETURNING s.id INTO v_id;
	PERFORM agent._audit(v_org, NULL, 'secret.set', NULL, actor,
						 jsonb_build_object('secret_id', v_id, 'name', name, 'rule_id', v_rule.id,
											'host', v_rule.host, 'header', header,
											'agents', to_jsonb(agents), 'key_id', v_key.key_id,
											'sealed_sha256', encode(sha256(v_box), 'hex')));
	RETURN v_id;
END
$$;

-- Narrow a secret to some agents of the org (NULL: all of them, '{}':
-- none) without sealing it again.
CREATE FUNCTION agent.set_secret_agents(name text, agents uuid[], actor text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_org	uuid;
	v_id	uuid;
	v_bad	uuid;
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	v_org := agent.current_org();
	SELECT x INTO v_bad FROM unnest(agents) x
	 WHERE x IS NULL OR NOT EXISTS (SELECT 1 FROM agent.agents a WHERE a.id = x AND a.org_id = v_org)
	 LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'agent % does not exist', v_bad USING ERRCODE = 'no_data_found';
	END IF;
	UPDATE agent.secrets s SET agent_ids = agent._secret_agents(agents)
	 WHERE s.org_id = v_org AND s.name = name
	RETURNING s.id INTO v_id;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'secret % does not exist', agent._shown(name) USING ERRCODE = 'no_data_found';
	END IF;
	PERFORM agent._audit(v_org, NULL, 'secret.narrowed', NULL, actor,
						 jsonb_build_object('secret_id', v_id, 'name', name, 'agents', to_jsonb(agents)));
END
$$;

-- Remove a secret of the current org; false when there is none.  Runs
-- approved with it and not yet started fail to start (their prepare step
-- finds it gone), with their credits refunded.
CREATE FUNCTION agent.remove_secret(name text, actor text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	DELETE FROM agent.secrets s WHERE s.org_id = agent.current_org() AND s.name = name
	RETURNING s.id INTO v_id;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM agent._audit(agent.current_org(), NULL, 'secret.removed', NULL, actor,
						 jsonb_build_object('secret_id', v_id, 'name', name));
	RETURN true;
END
$$;

-- An org's secrets as its admin and backend see them: never the sealed box.
CREATE VIEW agent.org_secrets WITH (security_invoker = true) AS
SELECT s.id, s.org_id, s.name, s.header, s.rule_id, r.host, r.ports, s.agent_ids, s.key_id,
	   s.set_by, s.set_at
  FROM agent.secrets s JOIN agent.egress_rules r ON r.id = s.rule_id;
COMMENT ON VIEW agent.org_secrets IS
	'the current org''s secrets: name, bound host rule and header, agents, key (never the value, nor its sealed box)';

-- A rule that carries a secret is not removed from under it.
CREATE FUNCTION agent._egress_rules_keep_secrets() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_name	text;
BEGIN
	SELECT s.name INTO v_name FROM agent.secrets s WHERE s.rule_id = OLD.id ORDER BY s.name LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'egress rule % carries secret %', OLD.id, v_name
			USING ERRCODE = 'dependent_objects_still_exist',
				  HINT = 'Remove the secret first (agent.remove_secret), or bind it to another rule (agent.set_secret).';
	END IF;
	RETURN OLD;
END
$$;
CREATE TRIGGER egress_rules_keep_secrets
	BEFORE DELETE ON agent.egress_rules
	FOR EACH ROW EXECUTE FUNCTION agent._egress_rules_keep_secrets();

-- ---- on the run --------------------------------------------------------------------

-- The secrets a run of the agent gets on a rule, for its effective policy
-- (agent._effective_egress): [{id, name, header}] by name, NULL when none.
CREATE FUNCTION agent._rule_secrets(rule uuid, agent_id uuid) RETURNS jsonb
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT jsonb_agg(jsonb_build_object('id', s.id, 'name', s.name, 'header', s.header) ORDER BY s.name)
	  FROM agent.secrets s
	 WHERE s.rule_id = _rule_secrets.rule
	   AND (s.agent_ids IS NULL OR _rule_secrets.agent_id = ANY (s.agent_ids))
$$;

-- What the prepare step hands the runner for each secret of the run's
-- approved policy: its name and the text secrets.c (src/runner) reads,
-- one "tag value" line each: key, org, rule, host (the pattern the
-- approved policy names), header, sealed (base64).  A secret changed since
-- the request (another rule or header, gone) is refused (P0002): the
-- approval covered the one the card showed.  At most 16 per run (54000).
CREATE FUNCTION agent._secrets_to_place(invocation uuid)
	RETURNS TABLE (name text, content bytea)
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r		agent.invocations;
	e		jsonb;
	x		jsonb;
	s		agent.secrets;
	n		integer := 0;
BEGIN
	SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation;
	IF NOT FOUND OR r.egress_policy IS NULL THEN
		RETURN;
	END IF;
	FOR e IN SELECT y FROM jsonb_array_elements(r.egress_policy->'rules') y WHERE y ? 'secrets' LOOP
		FOR x IN SELECT z FROM jsonb_array_elements(e->'secrets') z LOOP
			n := n + 1;
			IF n > 16 THEN
				RAISE EXCEPTION 'the run has more than 16 secrets; at most 16 can be brokered'
					USING ERRCODE = 'program_limit_exceeded',
						  HINT = 'Narrow some secrets to the agents that need them (agent.set_secret_agents).';
			END IF;
			SELECT * INTO s FROM agent.secrets t WHERE t.id = (x->>'id')::uuid;
			IF NOT FOUND OR s.org_id <> r.org_id OR s.name <> x->>'name' OR s.header <> x->>'header'
			   OR s.rule_id <> (e->>'id')::uuid THEN
				-- (not 55000: to a runner that is "the lease is not yours")
				RAISE EXCEPTION 'secret % of invocation % was changed or removed after the run was requested', x->>'name', invocation
					USING ERRCODE = 'no_data_found',
						  HINT = 'Request the execution again.';
			END IF;
			name := s.name;
			content := convert_to(format(E'key %s\norg %s\nrule %s\nhost %s\nheader %s\nsealed %s\n',
										 s.key_id, r.org_id, s.rule_id, e->>'host', s.header,
										 translate(encode(s.sealed, 'base64'), E'\n', '')), 'UTF8');
			RETURN NEXT;
		END LOOP;
	END LOOP;
END
$$;

-- ---- runners: which keys they hold ----------------------------------------------

-- The calling runner's secrets keys (agent_runner), all of them: the ids
-- of the keys in its secrets_key_file ('{}': none).  What it no longer
-- lists, it no longer holds (runs sealed to it are claimed by others).
-- Returns how many it holds now.
CREATE FUNCTION agent.runner_report_secret_keys(runner uuid, incarnation uuid, key_ids text[])
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn		agent.runners := agent._runner_current(runner, incarnation);
	k		text;
BEGIN
	IF key_ids IS NULL THEN
		RAISE EXCEPTION 'key_ids must not be null'
			USING ERRCODE = 'null_value_not_allowed', HINT = 'Report no keys as ''{}''.';
	END IF;
	IF cardinality(key_ids) > 8 THEN
		RAISE EXCEPTION 'a runner may report at most 8 secrets keys' USING ERRCODE = 'program_limit_exceeded';
	END IF;
	FOREACH k IN ARRAY key_ids LOOP
		IF k IS NULL OR k !~ '^[0-9a-f]{16}$' THEN
			RAISE EXCEPTION 'invalid secrets key id "%"', agent._shown(k)
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = 'A key id is the first 16 hex digits of the sha256 of its public key.';
		END IF;
	END LOOP;
	DELETE FROM agent.runner_secret_keys rk
	 WHERE rk.runner_id = rn.id AND NOT rk.key_id = ANY (key_ids);
	INSERT INTO agent.runner_secret_keys (runner_id, key_id)
	SELECT DISTINCT rn.id, x FROM unnest(key_ids) x
	ON CONFLICT (runner_id, key_id) DO NOTHING;
	RETURN (SELECT count(*)::integer FROM agent.runner_secret_keys rk WHERE rk.runner_id = rn.id);
END
$$;
COMMENT ON FUNCTION agent.runner_report_secret_keys(uuid, uuid, text[]) IS
	'the secrets keys the calling runner holds (all of their ids); returns how many';

-- The keys a run's secrets are sealed to ('{}': it has none).  From its
-- frozen egress policy's secrets, as the prepare step will place them.
CREATE FUNCTION agent._secret_keys_of(policy jsonb) RETURNS text[]
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
	RETURN coalesce((SELECT array_agg(DISTINCT s.key_id ORDER BY s.key_id)
					   FROM jsonb_array_elements(policy->'rules') e,
							jsonb_array_elements(e->'secrets') x
					   JOIN agent.secrets s ON s.id = (x->>'id')::uuid
					  WHERE e ? 'secrets'), '{}');

-- May this runner claim this run (called by the claim for each candidate,
-- 42_claim.sql)?  One without secrets: any runner.  One with: only a
-- runner that reported every key they are sealed to.
CREATE FUNCTION agent._secrets_claimable(r agent.invocations, runner uuid) RETURNS boolean
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_keys	text[];
BEGIN
	IF r.egress_policy IS NULL OR NOT jsonb_path_exists(r.egress_policy, '$.rules[*].secrets') THEN
		RETURN true;
	END IF;
	v_keys := agent._secret_keys_of(r.egress_policy);
	RETURN runner IS NOT NULL
		AND v_keys <@ coalesce((SELECT array_agg(rk.key_id) FROM agent.runner_secret_keys rk
								 WHERE rk.runner_id = runner), '{}');
END
$$;

-- Why an approved run with secrets waits, for agent.queue_status(): no
-- live active runner with slots holds every key they are sealed to.
-- NULL: its secrets do not hold it back.
CREATE FUNCTION agent._secrets_wait(policy jsonb) RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_keys	text[];
BEGIN
	IF policy IS NULL OR NOT jsonb_path_exists(policy, '$.rules[*].secrets') THEN
		RETURN NULL;
	END IF;
	v_keys := agent._secret_keys_of(policy);
	IF EXISTS (SELECT 1 FROM agent.runners rn
				WHERE rn.state = 'active' AND agent._runner_slots(rn) > 0
				  AND rn.last_heartbeat >= now() - agent._runner_lease()
				  AND v_keys <@ coalesce((SELECT array_agg(rk.key_id) FROM agent.runner_secret_keys rk
										   WHERE rk.runner_id = rn.id), '{}')) THEN
		RETURN NULL;
	END IF;
	RETURN format('no live runner holds the secrets key %s', array_to_string(v_keys, ', '));
END
$$;

-- Every use of a secret and every blocked placeholder of the run (the
-- connection rows with a secret, agent._record_egress) is an audit event,
-- in the transaction that writes the tool call, after the run's
-- egress.connections event (this trigger's name sorts after
-- agent_tool_calls_egress): the name, host, port and row, never a value.
CREATE FUNCTION agent._tool_call_secrets() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c	record;
BEGIN
	IF NEW.egress IS NULL THEN
		RETURN NEW;
	END IF;
	FOR c IN SELECT e.seq, e.secret, e.host, e.port, e.allowed, e.reason
			   FROM agent.egress_connections e
			  WHERE e.invocation_id = NEW.invocation_id AND e.secret IS NOT NULL
			  ORDER BY e.seq LOOP
		PERFORM agent._audit(NEW.org_id, NEW.workspace_id,
							 CASE WHEN c.allowed THEN 'secret.used' ELSE 'secret.blocked' END,
							 NEW.invocation_id, 'system',
							 jsonb_strip_nulls(jsonb_build_object('name', c.secret, 'host', c.host,
																  'port', c.port, 'seq', c.seq,
																  'reason', c.reason)));
	END LOOP;
	RETURN NEW;
END
$$;
CREATE TRIGGER agent_tool_calls_secrets
	BEFORE INSERT ON agent.agent_tool_calls
	FOR EACH ROW EXECUTE FUNCTION agent._tool_call_secrets();

-- Product data: in a pg_dump of the database (sealed boxes only).
SELECT pg_catalog.pg_extension_config_dump('agent.secret_keys', '');
SELECT pg_catalog.pg_extension_config_dump('agent.secrets', '');

-- ---- privileges and row-level security ---------------------------------------------
ALTER TABLE agent.secret_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.secrets ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.runner_secret_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY auditor_read ON agent.secret_keys FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.runner_secret_keys FOR SELECT TO agent_auditor USING (true);
CREATE POLICY tenant_org ON agent.secrets FOR SELECT TO agent_backend, agent_admin
	USING (org_id = agent.current_org());
CREATE POLICY auditor_read ON agent.secrets FOR SELECT TO agent_auditor USING (true);
-- the columns but the sealed box (the auditor reads every column: 99_privileges.sql)
GRANT SELECT (id, org_id, name, rule_id, header, agent_ids, key_id, set_by, set_at)
	ON agent.secrets TO agent_backend, agent_admin;
GRANT SELECT ON agent.org_secrets TO agent_backend, agent_admin, agent_auditor;
GRANT SELECT ON agent.secret_key_status TO agent_auditor;
GRANT EXECUTE ON FUNCTION
	agent.secrets_public_key(),
	agent.set_secret(text, uuid, text, text, text, uuid[]),
	agent.set_secret_agents(text, uuid[], text),
	agent.remove_secret(text, text)
	TO agent_admin;
GRANT EXECUTE ON FUNCTION agent.runner_report_secret_keys(uuid, uuid, text[]) TO agent_runner;
