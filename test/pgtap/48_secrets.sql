-- Secrets (issue 31, docs/secrets.md), the database's side: who may store
-- one and how a bad one is refused, that the database holds the sealed box
-- only, that a run's secrets are part of the egress policy its card shows
-- and its approval binds, what the prepare step hands a runner (and that a
-- secret changed since the request is refused), the narrowing to agents,
-- the key's life, and what the backend and another org see.
BEGIN;
SELECT plan(48);

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('48e00000-0000-4000-8000-000000000001', 'tap-secrets', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('48a00000-0000-4000-8000-00000000000a', 'Secrets A', 'pro'),
	('48a00000-0000-4000-8000-00000000000b', 'Secrets B', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('48b00000-0000-4000-8000-00000000000a', '48a00000-0000-4000-8000-00000000000a', 'A'),
	('48b00000-0000-4000-8000-00000000000b', '48a00000-0000-4000-8000-00000000000b', 'B');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('48c00000-0000-4000-8000-00000000000a', '48a00000-0000-4000-8000-00000000000a', '48b00000-0000-4000-8000-00000000000a',
	 'A1', 'specialist', '48e00000-0000-4000-8000-000000000001', true),
	('48c00000-0000-4000-8000-0000000000a2', '48a00000-0000-4000-8000-00000000000a', '48b00000-0000-4000-8000-00000000000a',
	 'A2', 'specialist', '48e00000-0000-4000-8000-000000000001', true),
	('48c00000-0000-4000-8000-00000000000b', '48a00000-0000-4000-8000-00000000000b', '48b00000-0000-4000-8000-00000000000b',
	 'B1', 'specialist', '48e00000-0000-4000-8000-000000000001', true);

SELECT agent.grant_credits('48a00000-0000-4000-8000-00000000000a', 100, 'tap');

CREATE FUNCTION pg_temp.error_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END
$$;
-- A stand-in for what `sandbox-secret seal` prints: a box of the size a
-- value of n bytes sealed for that binding has (the database cannot tell
-- more), to key k.
CREATE FUNCTION pg_temp.sealed(k text, org uuid, name text, host text, header text, n integer)
	RETURNS text LANGUAGE sql AS $$
	SELECT 'sealed:1:' || k || ':' || translate(encode(convert_to(repeat('x',
		48 + octet_length(agent._secret_binding(org, name, host, header)) + length('value ' || n || E':\n') + n), 'UTF8'),
		'base64'), E'\n', '')
$$;

-- ---- the operator's key -----------------------------------------------------
SELECT is(pg_temp.error_of($$SELECT agent.add_secret_key('bm90IGEga2V5', 'operator')$$),
	'22023: invalid public key for secrets', 'a key that is not 32 bytes of base64 is refused');
SELECT is(agent.add_secret_key('SAMPLEKEYSAMPLEKEYSAMPLEKEYSAMPLEKEYSAMPLEK=', 'operator'),
	left(encode(sha256(decode('SAMPLEKEYSAMPLEKEYSAMPLEKEYSAMPLEKEYSAMPLEK=', 'base64')), 'hex'), 16),
	'a key''s id is the first 16 hex digits of its sha256');
SELECT agent.add_secret_key('SAMPLEKEYSAMPLEKEYSAMPLEKEYSAMPLEKEYSAMPLEK=', 'operator') AS kid \gset
SELECT is((SELECT current FROM agent.secret_key_status WHERE key_id = :'kid'), true, 'the newest key is the current one');
SELECT ok(NOT has_function_privilege('agent_admin', 'agent.add_secret_key(text, text)', 'EXECUTE'),
	'registering a key is the operator''s, not an admin''s');

-- ---- storing a secret (the admin's) -----------------------------------------
-- (the boxes made here: the admin's role calls no internal function)
SELECT pg_temp.sealed('0123456789abcdef', '48a00000-0000-4000-8000-00000000000a', 'T', 'api.example.com', 'Authorization: Bearer {}', 20) AS s_unknown,
	   pg_temp.sealed(:'kid', '48a00000-0000-4000-8000-00000000000a', 'API_TOKEN', 'api.example.com', 'Authorization: Bearer {}', 40) AS s_api,
	   pg_temp.sealed(:'kid', '48a00000-0000-4000-8000-00000000000a', 'API_TOKEN', 'api.example.com', 'X-Token: {}', 40) AS s_api2,
	   pg_temp.sealed(:'kid', '48a00000-0000-4000-8000-00000000000a', 'ORG_KEY', '*.example.org', 'X-Api-Key: {}', 8) AS s_org \gset
SET ROLE agent_admin;
SELECT agent.set_tenant('48a00000-0000-4000-8000-00000000000a', NULL);
SELECT agent.add_egress_rule('api.example.com', '{443}', 'admin') AS rule \gset
SELECT agent.add_egress_rule('*.example.org', '{443,8443}', 'admin') AS wrule \gset
SELECT agent.add_egress_rule(NULL, '{443}', 'admin', cidr => '140.82.112.0/20') AS crule \gset
SELECT is((SELECT key_id || ' ' || org_id FROM agent.secrets_public_key()),
	:'kid' || ' 48a00000-0000-4000-8000-00000000000a', 'the admin gets the key to seal to and the org''s id');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('api_token', %L, 'Authorization: Bearer {}', 'x', 'admin')$$, :'rule')),
	'22023: invalid secret name "api_token"', 'a name is an upper-case environment variable');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('LD_PRELOAD', %L, 'Authorization: Bearer {}', 'x', 'admin')$$, :'rule')),
	'42939: secret name LD_PRELOAD is reserved', 'a name that changes how programs run is reserved');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('HTTPS_PROXY', %L, 'Authorization: Bearer {}', 'x', 'admin')$$, :'rule')),
	'42939: secret name HTTPS_PROXY is reserved', 'so is one the sandbox sets itself');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('T', %L, 'Authorization: Bearer', 'x', 'admin')$$, :'rule')),
	'22023: invalid secret header "Authorization: Bearer"', 'a header without {} is refused');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('T', %L, 'Authorization: {}{}', 'x', 'admin')$$, :'rule')),
	'22023: invalid secret header "Authorization: {}{}"', 'so is one with {} twice');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('T', %L, E'Authorization: Bearer {}\r\nX-Evil: 1', 'x', 'admin')$$, :'rule')),
	E'22023: invalid secret header "Authorization: Bearer {}\r\nX-Evil: 1"', 'and one that would start another header line');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('T', %L, 'Host: {}', 'x', 'admin')$$, :'rule')),
	'22023: header Host cannot carry a secret', 'fields that route or frame a request carry no secret');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('T', %L, 'Authorization: Bearer {}', 'x', 'admin')$$, :'crule')),
	'22023: a secret needs a host rule', 'a CIDR rule carries no secret');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('T', %L, 'Authorization: Bearer {}', 'sealed:1:%s:AAAA', 'admin')$$, :'rule', :'kid')),
	'22023: sealed secret does not fit secret T', 'a box sealed for another binding (its size) is refused');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('T', %L, 'Authorization: Bearer {}', 'plain-value-123', 'admin')$$, :'rule')),
	'22023: invalid sealed secret', 'a value in clear is refused: the database takes sealed boxes only');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('T', %L, 'Authorization: Bearer {}', %L, 'admin')$$, :'rule', :'s_unknown')),
	'22023: secret key 0123456789abcdef is not one the runner hosts hold', 'a box sealed to an unknown key is refused');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('T', %L, 'Authorization: Bearer {}', 'x', 'admin', ARRAY['48c00000-0000-4000-8000-00000000000b']::uuid[])$$, :'rule')),
	'P0002: agent <id> does not exist', 'another org''s agent does not exist here');
SELECT agent.set_secret('API_TOKEN', :'rule', 'Authorization: Bearer {}', :'s_api', 'admin') AS secret \gset
SELECT agent.set_secret('ORG_KEY', :'wrule', 'X-Api-Key: {}', :'s_org', 'admin',
	ARRAY['48c00000-0000-4000-8000-0000000000a2']::uuid[]) AS wsecret \gset
SELECT is((SELECT name || ' ' || host || ' ' || header FROM agent.org_secrets WHERE id = :'secret'),
	'API_TOKEN api.example.com Authorization: Bearer {}', 'the admin sees the secret: name, bound host, header');
SELECT is(pg_temp.error_of($$SELECT sealed FROM agent.secrets$$),
	'42501: permission denied for table secrets', '... never its sealed box');
SELECT is(pg_temp.error_of(format($$SELECT agent.remove_egress_rule(%L, 'admin')$$, :'rule')),
	'2BP01: egress rule <id> carries secret API_TOKEN', 'a rule that carries a secret is not removed');
RESET ROLE;
SELECT is((SELECT details->>'name' || ' ' || (details->>'key_id') || ' ' || (details ? 'sealed_sha256')::text
			 FROM agent.audit_events WHERE event_type = 'secret.set' AND details->>'secret_id' = :'secret'),
	'API_TOKEN ' || :'kid' || ' true', 'storing it is audited: name, key, the box''s hash');
SELECT is(pg_temp.error_of(format($$SELECT agent.retire_secret_key(%L, 'operator')$$, :'kid')),
	'55000: secret key ' || :'kid' || ' still seals 2 secrets', 'a key that seals secrets is not retired');

-- ---- another org and the backend ------------------------------------------
SET ROLE agent_admin;
SELECT agent.set_tenant('48a00000-0000-4000-8000-00000000000b', NULL);
SELECT is((SELECT count(*) FROM agent.org_secrets), 0::bigint, 'another org sees none of them');
SELECT is(pg_temp.error_of(format($$SELECT agent.set_secret('API_TOKEN', %L, 'Authorization: Bearer {}', 'x', 'admin')$$, :'rule')),
	'P0002: egress rule <id> does not exist', 'nor binds a secret to this org''s rule');
SELECT is(agent.remove_secret('API_TOKEN', 'admin'), false, 'nor removes this org''s');
RESET ROLE;
SELECT ok(NOT has_function_privilege('agent_backend', 'agent.set_secret(text, uuid, text, text, text, uuid[])', 'EXECUTE'),
	'the backend cannot store a secret');
SELECT ok(NOT has_function_privilege('agent_backend', 'agent.set_secret_agents(text, uuid[], text)', 'EXECUTE'),
	'nor narrow one');

-- ---- on the run -------------------------------------------------------------
SET ROLE agent_backend;
SELECT agent.set_tenant('48a00000-0000-4000-8000-00000000000a', '48b00000-0000-4000-8000-00000000000a');
SELECT is((SELECT may_reach FROM agent.effective_egress('48c00000-0000-4000-8000-00000000000a')),
	'*.example.org:443,8443, api.example.com:443, 140.82.112.0/20:443; secret API_TOKEN → api.example.com:443',
	'what a run may reach names the secret and where it goes');
SELECT is((SELECT may_reach FROM agent.effective_egress('48c00000-0000-4000-8000-0000000000a2')),
	'*.example.org:443,8443, api.example.com:443, 140.82.112.0/20:443; secret ORG_KEY → *.example.org:443,8443, secret API_TOKEN → api.example.com:443',
	'a secret narrowed to an agent is that agent''s');
SELECT r.invocation_id AS inv, r.approval_id AS appr
  FROM agent.request_execution('48b00000-0000-4000-8000-00000000000a', '48c00000-0000-4000-8000-00000000000a', NULL,
							   'python', 'print(1)', 'alice') r \gset
SELECT is((SELECT egress_may_reach FROM agent.approval_card(:'appr')),
	'*.example.org:443,8443, api.example.com:443, 140.82.112.0/20:443; secret API_TOKEN → api.example.com:443',
	'the card shows "secret API_TOKEN → api.example.com:443"');
SELECT agent.approve(:'appr', 'bob');
RESET ROLE;
SELECT is((SELECT i.egress_sha256 = a.approved_egress_sha256
			  AND i.egress_policy->'rules'->1->'secrets' = jsonb_build_array(jsonb_build_object(
				  'id', :'secret'::uuid, 'name', 'API_TOKEN', 'header', 'Authorization: Bearer {}'))
			 FROM agent.invocations i JOIN agent.approval_requests a ON a.invocation_id = i.id WHERE i.id = :'inv'),
	true, 'the approval binds the policy''s hash, secrets included');
SELECT isnt((SELECT egress_sha256 FROM agent.invocations WHERE id = :'inv'),
	agent._egress_sha256((SELECT egress_policy #- '{rules,1,secrets}' FROM agent.invocations WHERE id = :'inv')),
	'a policy without the secret has another hash');
UPDATE agent.invocations SET state = 'provisioning' WHERE id = :'inv';
SELECT is((SELECT convert_from(content, 'UTF8') FROM agent._secrets_to_place(:'inv')),
	format(E'key %s\norg 48a00000-0000-4000-8000-00000000000a\nrule %s\nhost api.example.com\nheader Authorization: Bearer {}\nsealed %s\n',
		   :'kid', :'rule', (SELECT translate(encode(sealed, 'base64'), E'\n', '') FROM agent.secrets WHERE id = :'secret')),
	'the prepare step hands the runner the box and what it must be bound to');
SELECT is((SELECT count(*) FROM agent._prepare_invocation(:'inv', true) p WHERE p.kind = 'secret'), 1::bigint,
	'... as a row of kind secret');
SET ROLE agent_admin;
SELECT agent.set_tenant('48a00000-0000-4000-8000-00000000000a', NULL);
SELECT agent.set_secret('API_TOKEN', :'rule', 'X-Token: {}', :'s_api2', 'admin');
RESET ROLE;
SELECT is(pg_temp.error_of(format('SELECT * FROM agent._secrets_to_place(%L)', :'inv')),
	'P0002: secret API_TOKEN of invocation <id> was changed or removed after the run was requested',
	'a secret changed since the request (another header) is refused');

-- set_secret_agents: '{}' is no agent (not all of them)
SET ROLE agent_admin;
SELECT agent.set_tenant('48a00000-0000-4000-8000-00000000000a', NULL);
SELECT agent.set_secret_agents('API_TOKEN', '{}', 'admin');
SELECT is((SELECT agent_ids FROM agent.org_secrets WHERE name = 'API_TOKEN'), '{}'::uuid[], 'narrowed to no agent');
RESET ROLE;
SET ROLE agent_backend;
SELECT agent.set_tenant('48a00000-0000-4000-8000-00000000000a', '48b00000-0000-4000-8000-00000000000a');
SELECT is((SELECT may_reach FROM agent.effective_egress('48c00000-0000-4000-8000-00000000000a')),
	'*.example.org:443,8443, api.example.com:443, 140.82.112.0/20:443', '... no agent gets it');
SELECT is(pg_temp.error_of($$SELECT sealed FROM agent.secrets$$),
	'42501: permission denied for table secrets', 'the backend reads no sealed box');
SELECT is((SELECT count(*) FROM agent.org_secrets), 2::bigint, 'it sees its org''s secrets by name');
RESET ROLE;
SET ROLE agent_backend;
SELECT agent.set_tenant('48a00000-0000-4000-8000-00000000000b', '48b00000-0000-4000-8000-00000000000b');
SELECT is((SELECT count(*) FROM agent.org_secrets), 0::bigint, 'another org''s backend sees none');
RESET ROLE;

-- ---- the card's text and the connection log's hash -------------------------
SELECT is(pg_temp.error_of($$SELECT agent.egress_may_reach('{"rules": [{"host": "a.test", "ports": [443], "secrets": {"name": "X"}}]}')$$),
	'22023: invalid egress policy', 'a policy whose secrets are not a list is refused');
SELECT is(agent.egress_may_reach('{"rules": [{"host": "a.test", "ports": [443]}]}'), 'a.test:443',
	'a policy without secrets reads as before');
INSERT INTO agent.egress_connections (invocation_id, seq, org_id, workspace_id, kind, host, port, allowed,
									  bytes_up, bytes_down, duration_ms)
VALUES (:'inv', 1, '48a00000-0000-4000-8000-00000000000a', '48b00000-0000-4000-8000-00000000000a',
		'connect', 'api.example.com', 443, true, 1, 2, 3);
SELECT is(agent.egress_log_sha256(:'inv'),
	encode(sha256(convert_to(jsonb_build_object('seq', 1, 'kind', 'connect', 'host', 'api.example.com', 'port', 443,
		'address', NULL, 'allowed', true, 'rule_id', NULL, 'reason', NULL, 'bytes_up', 1, 'bytes_down', 2,
		'duration_ms', 3)::text || E'\n', 'UTF8')), 'hex'),
	'a row without a secret hashes as before secrets existed');
UPDATE agent.egress_connections SET secret = 'API_TOKEN' WHERE invocation_id = :'inv';
SELECT is(agent.egress_log_sha256(:'inv'),
	encode(sha256(convert_to(jsonb_build_object('seq', 1, 'kind', 'connect', 'host', 'api.example.com', 'port', 443,
		'address', NULL, 'allowed', true, 'rule_id', NULL, 'reason', NULL, 'bytes_up', 1, 'bytes_down', 2,
		'duration_ms', 3, 'secret', 'API_TOKEN')::text || E'\n', 'UTF8')), 'hex'),
	'a row with one hashes its name too');

-- ---- the key's life -----------------------------------------------------------
SET ROLE agent_admin;
SELECT agent.set_tenant('48a00000-0000-4000-8000-00000000000a', NULL);
SELECT is(agent.remove_secret('API_TOKEN', 'admin'), true, 'the admin removes a secret');
SELECT is(agent.remove_secret('ORG_KEY', 'admin'), true, '... and the other');
RESET ROLE;
SELECT is(agent.retire_secret_key(:'kid', 'operator'), true, 'a key that seals nothing is retired');
SELECT is(pg_temp.error_of($$SELECT agent.add_secret_key('SAMPLEKEYSAMPLEKEYSAMPLEKEYSAMPLEKEYSAMPLEK=', 'operator')$$),
	'55000: secret key ' || :'kid' || ' was retired', 'a retired key does not come back');

SELECT * FROM finish();
ROLLBACK;
