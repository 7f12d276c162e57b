-- Conversations' sandbox sessions, files in and out, and skills.
--
-- A conversation owns at most one active session: a workspace directory on
-- the supervisor's host that survives between the conversation's runs.  It
-- is rebuilt (a new, empty workspace; the conversation's files put back)
-- when it idled out or when its agent's skills changed.  Files live in the
-- database and outlive every sandbox.  Skills are versioned bundles of
-- files, mounted read-only at /skills/<name>/.

INSERT INTO agent.settings (key, value, description) VALUES
	('session_idle_timeout', '30 minutes',
	 'a conversation''s sandbox session idle longer than this is ended by agent.expire_idle_sessions() (an interval)'),
	('max_upload_bytes', '10485760',
	 'largest file agent.upload_file() accepts, in bytes'),
	('max_conversation_bytes', '104857600',
	 'largest total size of the files of one conversation, in bytes'),
	('max_produced_files', '100',
	 'most files one run may return; the rest are reported as skipped'),
	('max_produced_bytes', '52428800',
	 'largest total size of the files one run may return; the rest are reported as skipped'),
	('max_produced_file_bytes', '20971520',
	 'largest single file one run may return; larger ones are reported as skipped'),
	('max_skill_bytes', '10485760',
	 'largest total size of the files of one skill version, in bytes'),
	('max_skill_files', '1000',
	 'most files one skill version may hold');

-- ----------------------------------------------------------------------
-- Skills
-- ----------------------------------------------------------------------

CREATE TABLE agent.skills (
	id			uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id		uuid NOT NULL REFERENCES agent.orgs (id),
	name		text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
	version		integer NOT NULL CHECK (version > 0),
	description text,
	created_at	timestamptz NOT NULL DEFAULT now(),
	UNIQUE (org_id, name, version),
	UNIQUE (org_id, id)
);
COMMENT ON TABLE agent.skills IS 'a named, versioned, immutable bundle of files mounted read-only at /skills/<name>/';

CREATE TABLE agent.skill_files (
	skill_id	uuid NOT NULL REFERENCES agent.skills (id) ON DELETE CASCADE,
	path		text NOT NULL,
	content		bytea NOT NULL,
	executable	boolean NOT NULL DEFAULT false,
	PRIMARY KEY (skill_id, path)
);

CREATE TABLE agent.agent_skills (
	org_id		uuid NOT NULL,
	workspace_id uuid NOT NULL,
	agent_id	uuid NOT NULL,
	skill_id	uuid NOT NULL,
	attached_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (agent_id, skill_id),
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id)
		ON DELETE CASCADE,
	FOREIGN KEY (org_id, skill_id) REFERENCES agent.skills (org_id, id)
);

-- The content type of a file by its name's extension (case-insensitive),
-- application/octet-stream when it is not known: what a produced file is
-- stored with, and an upload given no content type.  The one table.
CREATE FUNCTION agent.content_type_of(name text) RETURNS text
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp
AS $$
	SELECT coalesce(
		(SELECT t.type FROM (VALUES
			('txt', 'text/plain'), ('log', 'text/plain'), ('md', 'text/markdown'),
			('csv', 'text/csv'), ('tsv', 'text/tab-separated-values'),
			('html', 'text/html'), ('htm', 'text/html'), ('css', 'text/css'),
			('xml', 'application/xml'), ('json', 'application/json'),
			('jsonl', 'application/x-ndjson'), ('ndjson', 'application/x-ndjson'),
			('yaml', 'application/yaml'), ('yml', 'application/yaml'), ('toml', 'application/toml'),
			('py', 'text/x-python'), ('js', 'text/javascript'), ('mjs', 'text/javascript'),
			('ts', 'text/plain'), ('sh', 'text/x-shellscript'), ('sql', 'application/sql'),
			('png', 'image/png'), ('jpg', 'image/jpeg'), ('jpeg', 'image/jpeg'),
			('gif', 'image/gif'), ('webp', 'image/webp'), ('svg', 'image/svg+xml'),
			('bmp', 'image/bmp'), ('tif', 'image/tiff'), ('tiff', 'image/tiff'),
			('ico', 'image/vnd.microsoft.icon'),
			('pdf', 'application/pdf'),
			('xlsx', 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet'),
			('xls', 'application/vnd.ms-excel'), ('ods', 'application/vnd.oasis.opendocument.spreadsheet'),
			('docx', 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'),
			('pptx', 'application/vnd.openxmlformats-officedocument.presentationml.presentation'),
			('zip', 'application/zip'), ('gz', 'application/gzip'), ('tar', 'application/x-tar'),
			('parquet', 'application/vnd.apache.parquet'), ('wav', 'audio/wav'),
			('mp3', 'audio/mpeg'), ('mp4', 'video/mp4')) t(ext, type)
		  WHERE t.ext = lower(substring(name FROM '\.([A-Za-z0-9]+)$'))),
		'application/octet-stream')
$$;

-- A relative path inside a workspace or bundle: no absolute path, no "..",
-- no empty or "." component, no NUL or control characters, bounded length.
CREATE FUNCTION agent.valid_relative_path(path text) RETURNS boolean
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	RETURN octet_length(path) BETWEEN 1 AND 1024
		AND path !~ '^/'
		AND path !~ '[[:cntrl:]]'
		AND NOT EXISTS (SELECT 1 FROM unnest(string_to_array(path, '/')) c
						 WHERE c IN ('', '.', '..') OR octet_length(c) > 255);

ALTER TABLE agent.skill_files ADD CHECK (agent.valid_relative_path(path));

-- The skills mounted for an agent, as one hash: a session built under one
-- hash is rebuilt when it changes.
CREATE FUNCTION agent._skills_hash(agent uuid) RETURNS text
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent
	RETURN (SELECT encode(sha256(convert_to(coalesce(string_agg(s.id::text || ':' || s.name || ':' || s.version,
														 ',' ORDER BY s.name, s.id), ''), 'UTF8')), 'hex')
			  FROM agent.agent_skills a JOIN agent.skills s ON s.id = a.skill_id
			 WHERE a.agent_id = _skills_hash.agent);

-- What a skill version stores against its org's quota: its files'
-- content and paths, its name and its description (the one definition:
-- create_skill counts it, delete_skill gives it back).
CREATE FUNCTION agent._skill_bytes(skill uuid) RETURNS bigint
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
	RETURN (SELECT octet_length(s.name) + coalesce(octet_length(s.description), 0)
				   + coalesce((SELECT sum(octet_length(f.content) + octet_length(f.path))
								 FROM agent.skill_files f WHERE f.skill_id = s.id), 0)
			  FROM agent.skills s WHERE s.id = skill)::bigint;

-- Create a new version of a skill from a set of files (jsonb object
-- path → base64 content).  Versions are immutable; returns the new id.
CREATE FUNCTION agent.create_skill(name text, files jsonb, description text DEFAULT NULL)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_id		uuid;
	v_version	integer;
	f			record;
	v_content	bytea;
	v_bytes		bigint := 0::bigint;
	n_files		integer := 0;
BEGIN
	PERFORM agent._require_tenant(false);
	IF name IS NULL OR files IS NULL THEN
		RAISE EXCEPTION 'name and files (a json object of path: base64 content) are required'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF jsonb_typeof(files) <> 'object' THEN
		RAISE EXCEPTION 'files must be a json object of path: base64 content'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = pg_catalog.format('It is a json %s.', jsonb_typeof(files));
	END IF;
	PERFORM agent._check_text(description, 'description', 'description');
	IF name !~ '^[a-z0-9][a-z0-9_.-]{0,63}$' THEN
		RAISE EXCEPTION 'invalid skill name "%"', agent._shown(name)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use 1 to 64 characters: lower-case letters, digits, "_", "." and "-", starting with a letter or digit.';
	END IF;
	PERFORM pg_advisory_xact_lock(hashtext('agent.skills:' || agent.current_org() || ':' || name));
	SELECT coalesce(max(s.version), 0) + 1 INTO v_version
	  FROM agent.skills s WHERE s.org_id = agent.current_org() AND s.name = create_skill.name;
	INSERT INTO agent.skills (org_id, name, version, description)
	VALUES (agent.current_org(), create_skill.name, v_version, create_skill.description)
	RETURNING id INTO v_id;
	FOR f IN SELECT key, value FROM jsonb_each_text(files) LOOP
		n_files := n_files + 1;
		IF n_files > agent._setting('max_skill_files')::integer THEN
			RAISE EXCEPTION 'skill "%" has too many files', create_skill.name
				USING ERRCODE = 'program_limit_exceeded',
					  DETAIL = format('A skill version may hold at most %s files (agent.settings max_skill_files).',
									  agent._setting('max_skill_files'));
		END IF;
		IF NOT agent.valid_relative_path(f.key) THEN
			RAISE EXCEPTION 'invalid skill file path "%"', agent._shown(f.key)
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = 'Use a relative path without "..", empty components or control characters.';
		END IF;
		BEGIN
			v_content := decode(f.value, 'base64');
		EXCEPTION WHEN invalid_parameter_value THEN
			RAISE EXCEPTION 'the content of skill file "%" is not valid base64', agent._shown(f.key)
				USING ERRCODE = 'invalid_parameter_value';
		END;
		v_bytes := v_bytes + octet_length(v_content);
		IF v_bytes > agent._setting('max_skill_bytes')::bigint THEN
			RAISE EXCEPTION 'skill "%" is too large', create_skill.name
				USING ERRCODE = 'program_limit_exceeded',
					  DETAIL = format('The files of a skill version may hold at most %s bytes (agent.settings max_skill_bytes).',
									  agent._setting('max_skill_bytes'));
		END IF;
		INSERT INTO agent.skill_files (skill_id, path, content, executable)
		VALUES (v_id, f.key, v_content, f.key ~ '\.(sh|py|js)$');
	END LOOP;
	-- Counted: its files' content and paths, its name and description
	-- (agent._skill_bytes; a skill version has no audit event to count
	-- its text in).  max_skill_bytes is the content's cap.
	PERFORM agent._use_storage(agent.current_org(), agent._skill_bytes(v_id),
							   format('skill "%s"', create_skill.name));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_skill(text, jsonb, text) IS
	'create the next version of a skill of the current org from {path: base64 content}';

-- Attach / detach a skill to an agent of the current workspace.
CREATE FUNCTION agent.set_agent_skill(agent uuid, skill uuid, attached boolean DEFAULT true)
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._require_tenant();
	IF set_agent_skill.agent IS NULL OR skill IS NULL OR attached IS NULL THEN
		RAISE EXCEPTION 'agent, skill and attached must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.agents a WHERE a.id = set_agent_skill.agent
					  AND a.org_id = agent.current_org() AND a.workspace_id = agent.current_workspace()) THEN
		RAISE EXCEPTION 'agent % does not exist', set_agent_skill.agent USING ERRCODE = 'no_data_found';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.skills s WHERE s.id = skill AND s.org_id = agent.current_org()) THEN
		RAISE EXCEPTION 'skill % does not exist', skill USING ERRCODE = 'no_data_found';
	END IF;
	IF attached THEN
		INSERT INTO agent.agent_skills (org_id, workspace_id, agent_id, skill_id)
		VALUES (agent.current_org(), agent.current_workspace(), set_agent_skill.agent, skill)
		ON CONFLICT DO NOTHING;
	ELSE
		DELETE FROM agent.agent_skills a WHERE a.agent_id = set_agent_skill.agent AND a.skill_id = skill;
	END IF;
	PERFORM agent._audit(agent.current_org(), agent.current_workspace(),
						 CASE WHEN attached THEN 'skill.attached' ELSE 'skill.detached' END, NULL,
						 current_user, jsonb_build_object('agent_id', set_agent_skill.agent, 'skill_id', skill));
	IF attached THEN	-- (a detach frees: never refused)
		PERFORM agent._check_storage(agent.current_org(), 'the skill''s attachment');
	END IF;
END
$$;

-- ----------------------------------------------------------------------
-- Sessions
-- ----------------------------------------------------------------------

CREATE TABLE agent.sessions (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	conversation_id uuid NOT NULL,
	generation		integer NOT NULL CHECK (generation > 0),
	skills_hash		text NOT NULL,
	state			text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'ended')),
	end_reason		text,
	created_at		timestamptz NOT NULL DEFAULT now(),
	last_used_at	timestamptz NOT NULL DEFAULT now(),
	ended_at		timestamptz,
	-- the runner host its workspace is on (45_runners.sql); NULL: the
	-- in-database supervisor's host
	runner_id		uuid REFERENCES agent.runners (id),
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	UNIQUE (conversation_id, generation)
);
CREATE UNIQUE INDEX sessions_one_active ON agent.sessions (conversation_id) WHERE state = 'active';
-- What the session's workspace held after its last run (the supervisor
-- measures it), for the org's disk budget (max_session_disk_per_org).
ALTER TABLE agent.sessions
	ADD COLUMN disk_bytes bigint NOT NULL DEFAULT 0,
	ADD COLUMN disk_entries integer NOT NULL DEFAULT 0;
CREATE INDEX sessions_org_active_idx ON agent.sessions (org_id, last_used_at) WHERE state = 'active';
-- A runner's live sessions (agent.runner_live_sessions).
CREATE INDEX sessions_runner_active_idx ON agent.sessions (runner_id) WHERE state = 'active';
COMMENT ON TABLE agent.sessions IS 'a conversation''s sandbox workspace, kept between its runs';

-- Files of a conversation (or of a conversation-less run).  A name may have
-- several rows over time; the newest saved row of a name is its current
-- content.  Rows with status skipped/failed record what could not be
-- returned and why; they never carry content.
CREATE TABLE agent.files (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	conversation_id uuid,
	invocation_id	uuid REFERENCES agent.invocations (id),
	name			text NOT NULL,
	origin			text NOT NULL CHECK (origin IN ('uploaded', 'produced')),
	-- pruned: its content was removed by retention (70_retention.sql)
	status			text NOT NULL DEFAULT 'saved' CHECK (status IN ('saved', 'skipped', 'failed', 'pruned')),
	reason			text,
	content			bytea,
	size			bigint,
	sha256			text,
	content_type	text,
	created_by		text,
	created_at		timestamptz NOT NULL DEFAULT clock_timestamp(),
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	CHECK ((status = 'saved') = (content IS NOT NULL)),
	CHECK (status = 'saved' OR reason IS NOT NULL),
	CHECK (conversation_id IS NOT NULL OR invocation_id IS NOT NULL)
);
CREATE INDEX files_conversation_idx ON agent.files (conversation_id, name, created_at);
CREATE INDEX files_invocation_idx ON agent.files (invocation_id);
COMMENT ON TABLE agent.files IS 'uploaded and produced files; they outlive every sandbox';

-- Which file rows a session's workspace already holds.
CREATE TABLE agent.session_files (
	session_id	uuid NOT NULL REFERENCES agent.sessions (id) ON DELETE CASCADE,
	file_id		uuid NOT NULL REFERENCES agent.files (id),
	PRIMARY KEY (session_id, file_id)
);

-- (agent.invocations.session_id is declared with the table; its key here)
ALTER TABLE agent.invocations ADD FOREIGN KEY (session_id) REFERENCES agent.sessions (id);

-- The current saved file of each name of a conversation.
CREATE FUNCTION agent._current_files(conversation uuid)
	RETURNS SETOF agent.files
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent
AS $$
	SELECT DISTINCT ON (f.name) f.*
	  FROM agent.files f
	 WHERE f.conversation_id = conversation AND f.status = 'saved'
	 ORDER BY f.name, f.created_at DESC, f.id DESC
$$;

-- ----------------------------------------------------------------------
-- Files API
-- ----------------------------------------------------------------------

CREATE FUNCTION agent.upload_file(conversation uuid, name text, content bytea,
								  uploaded_by text, content_type text DEFAULT NULL)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c		agent.conversations;
	a		agent.agents;
	v_id	uuid;
	v_total bigint;
BEGIN
	PERFORM agent._require_tenant();
	IF conversation IS NULL OR name IS NULL OR content IS NULL OR uploaded_by IS NULL THEN
		RAISE EXCEPTION 'conversation, name, content and uploaded_by must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(uploaded_by, 'uploaded_by');
	PERFORM agent._check_text(content_type, 'content_type', 'content_type', true);
	-- Serialises uploads of a conversation with each other and with the
	-- claim of its runs; FOR NO KEY UPDATE, so that a caller holding it does
	-- not block the FOR KEY SHARE of the supervisor's inserts (files,
	-- sessions) that reference the conversation.
	SELECT * INTO c FROM agent.conversations x
	 WHERE x.id = conversation AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	SELECT * INTO a FROM agent.agents x WHERE x.id = c.agent_id;
	IF NOT a.file_upload_enabled THEN
		RAISE EXCEPTION 'agent "%" does not accept file uploads', a.name
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'Enable file uploads for the agent with agent.set_agent_file_upload().';
	END IF;
	IF NOT agent.valid_relative_path(name) THEN
		RAISE EXCEPTION 'invalid file name "%"', agent._shown(name)
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A name is at most 1024 bytes, each component at most 255.',
				  HINT = 'Use a relative path without "..", empty components or control characters.';
	END IF;
	IF octet_length(content) > agent._setting('max_upload_bytes')::bigint THEN
		RAISE EXCEPTION 'file "%" is too large (% bytes)', agent._shown(name), octet_length(content)
			USING ERRCODE = 'program_limit_exceeded',
				  HINT = format('The limit is %s bytes (agent.settings max_upload_bytes).',
								agent._setting('max_upload_bytes'));
	END IF;
	SELECT coalesce(sum(f.size), 0)::bigint INTO v_total FROM agent._current_files(conversation) f
	 WHERE f.name <> upload_file.name;
	IF v_total + octet_length(content) > agent._setting('max_conversation_bytes')::bigint THEN
		RAISE EXCEPTION 'the files of conversation % would exceed % bytes', conversation,
			agent._setting('max_conversation_bytes')
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	-- Counted (and a file past the quota refused) before it is written;
	-- checked again once its audit event is counted too.
	PERFORM agent._use_storage(c.org_id, octet_length(content), format('file "%s"', left(name, 256)));
	INSERT INTO agent.files (org_id, workspace_id, conversation_id, name, origin, content, size,
							 sha256, content_type, created_by)
	VALUES (c.org_id, c.workspace_id, c.id, name, 'uploaded', content, octet_length(content),
			encode(sha256(content), 'hex'), coalesce(content_type, agent.content_type_of(name)),
			uploaded_by)
	RETURNING id INTO v_id;
	PERFORM agent._audit(c.org_id, c.workspace_id, 'file.uploaded', NULL, uploaded_by,
						 jsonb_build_object('file_id', v_id, 'conversation_id', c.id, 'name', name,
											'size', octet_length(content),
											'sha256', encode(sha256(content), 'hex')));
	PERFORM agent._check_storage(c.org_id, format('file "%s"', left(name, 256)));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.upload_file(uuid, text, bytea, text, text) IS
	'store a file with a conversation; it is in /workspace before the conversation''s next run';

CREATE FUNCTION agent.list_files(conversation uuid)
	RETURNS TABLE (id uuid, name text, origin text, status text, reason text, size bigint,
				   sha256 text, content_type text, invocation_id uuid, created_at timestamptz,
				   current boolean)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF conversation IS NULL THEN
		RAISE EXCEPTION 'conversation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_tenant();
	IF NOT EXISTS (SELECT 1 FROM agent.conversations c WHERE c.id = conversation
					  AND c.org_id = agent.current_org() AND c.workspace_id = agent.current_workspace()) THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	RETURN QUERY
		SELECT f.id, f.name, f.origin, f.status, f.reason, f.size, f.sha256, f.content_type,
			   f.invocation_id, f.created_at,
			   f.id IN (SELECT cf.id FROM agent._current_files(conversation) cf)
		  FROM agent.files f
		 WHERE f.conversation_id = conversation
		 ORDER BY f.created_at, f.name;
END
$$;
COMMENT ON FUNCTION agent.list_files(uuid) IS
	'every file row of a conversation: uploads, returned files, and files that could not be returned (with the reason)';

CREATE FUNCTION agent.download_file(file uuid)
	RETURNS TABLE (name text, content_type text, size bigint, sha256 text, content bytea)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	f agent.files;
BEGIN
	IF file IS NULL THEN
		RAISE EXCEPTION 'file id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_tenant();
	SELECT * INTO f FROM agent.files x
	 WHERE x.id = file AND x.org_id = agent.current_org() AND x.workspace_id = agent.current_workspace();
	IF NOT FOUND THEN
		RAISE EXCEPTION 'file % does not exist', file
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	IF f.status <> 'saved' THEN
		RAISE EXCEPTION 'file "%" was not saved', f.name
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = f.reason;
	END IF;
	RETURN QUERY SELECT f.name, f.content_type, f.size, f.sha256, f.content;
END
$$;

-- Delete a file from a conversation: every saved version of the name
-- loses its content (status pruned, size and sha256 kept, as retention
-- does), the org's storage goes down by their size, and the conversation's
-- session, if it holds one of them, ends, so that its next run starts in a
-- workspace rebuilt from the files left (the file is gone from /workspace
-- too).  Refused while a run of the conversation is in flight.  Returns the
-- bytes freed.
CREATE FUNCTION agent.delete_file(conversation uuid, name text, deleted_by text)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c		agent.conversations;
	s		agent.sessions;
	v_ids	uuid[];
	v_bytes	bigint;
	v_sha	text;
BEGIN
	PERFORM agent._require_tenant();
	IF conversation IS NULL OR name IS NULL OR deleted_by IS NULL THEN
		RAISE EXCEPTION 'conversation, name and deleted_by must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(deleted_by, 'deleted_by');
	-- the lock uploads and the claim of the conversation's runs take
	SELECT * INTO c FROM agent.conversations x
	 WHERE x.id = conversation AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	IF EXISTS (SELECT 1 FROM agent.invocations i
				WHERE i.conversation_id = c.id AND i.state IN ('provisioning', 'running')) THEN
		RAISE EXCEPTION 'a run of conversation % is in flight', c.id
			USING ERRCODE = 'object_in_use',
				  HINT = 'Delete the file once the run has ended (agent.wait()).';
	END IF;
	WITH d AS (
		SELECT f.id FROM agent.files f
		 WHERE f.conversation_id = c.id AND f.name = delete_file.name AND f.status = 'saved'
		   FOR UPDATE),
	u AS (
		UPDATE agent.files f
		   SET status = 'pruned', content = NULL,
			   reason = format('deleted by %s on %s', deleted_by, now()::date)
		  FROM d WHERE f.id = d.id
		RETURNING f.id, f.size, f.sha256, f.created_at)
	SELECT array_agg(u.id ORDER BY u.created_at), coalesce(sum(u.size), 0)::bigint,
		   (array_agg(u.sha256 ORDER BY u.created_at DESC))[1]
	  INTO v_ids, v_bytes, v_sha
	  FROM u;
	IF v_ids IS NULL THEN
		RAISE EXCEPTION 'file "%" does not exist in conversation %', agent._shown(name), c.id
			USING ERRCODE = 'no_data_found',
				  HINT = 'agent.list_files() lists the files of a conversation.';
	END IF;
	PERFORM agent._free_storage(c.org_id, v_bytes);
	PERFORM agent._audit(c.org_id, c.workspace_id, 'file.deleted', NULL, deleted_by,
						 jsonb_build_object('conversation_id', c.id, 'name', name,
											'file_ids', to_jsonb(v_ids), 'bytes', v_bytes,
											'sha256', v_sha));
	SELECT * INTO s FROM agent.sessions x
	 WHERE x.conversation_id = c.id AND x.state = 'active'
	   AND EXISTS (SELECT 1 FROM agent.session_files sf
				   WHERE sf.session_id = x.id AND sf.file_id = ANY (v_ids))
	   FOR UPDATE;
	IF FOUND THEN
		UPDATE agent.sessions x SET state = 'ended', end_reason = 'file_deleted', ended_at = now()
		 WHERE x.id = s.id;
		PERFORM agent._audit(s.org_id, s.workspace_id, 'session.ended', NULL, deleted_by,
							 jsonb_build_object('session_id', s.id, 'generation', s.generation,
												'conversation_id', s.conversation_id,
												'reason', 'file_deleted'));
		PERFORM agent._wake_supervisor();	-- it deletes the workspace
	END IF;
	RETURN v_bytes;
END
$$;
COMMENT ON FUNCTION agent.delete_file(uuid, text, text) IS
	'delete a file (every saved version of the name) from a conversation and its sandbox session; returns the bytes freed';

-- Delete a version of a skill of the current org that no agent has
-- attached: its files go, the org's storage goes down by what it counted
-- (agent._skill_bytes).  Returns the bytes freed.
CREATE FUNCTION agent.delete_skill(skill uuid, deleted_by text)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	k		agent.skills;
	v_bytes	bigint;
	v_n		integer;
BEGIN
	PERFORM agent._require_tenant(false);
	IF skill IS NULL OR deleted_by IS NULL THEN
		RAISE EXCEPTION 'skill and deleted_by must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(deleted_by, 'deleted_by');
	SELECT * INTO k FROM agent.skills x
	 WHERE x.id = skill AND x.org_id = agent.current_org() FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'skill % does not exist', skill
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	-- (an attach takes the skill row's key share: it waits for this lock)
	SELECT count(*)::integer INTO v_n FROM agent.agent_skills a WHERE a.skill_id = k.id;
	IF v_n > 0 THEN
		RAISE EXCEPTION 'skill "%" version % is attached to % agent(s)', k.name, k.version, v_n
			USING ERRCODE = 'object_in_use',
				  HINT = 'Detach it first with agent.set_agent_skill(agent, skill, false).';
	END IF;
	v_bytes := agent._skill_bytes(k.id);
	DELETE FROM agent.skills x WHERE x.id = k.id;	-- its files with it
	PERFORM agent._free_storage(k.org_id, v_bytes);
	PERFORM agent._audit(k.org_id, NULL, 'skill.deleted', NULL, deleted_by,
						 jsonb_build_object('skill_id', k.id, 'name', k.name, 'version', k.version,
											'bytes', v_bytes));
	RETURN v_bytes;
END
$$;
COMMENT ON FUNCTION agent.delete_skill(uuid, text) IS
	'delete a skill version no agent has attached; returns the bytes freed';

-- ----------------------------------------------------------------------
-- Supervisor steps
-- ----------------------------------------------------------------------

-- Attach an invocation to its conversation's session, creating or
-- rebuilding it, on `runner` (NULL: the in-database supervisor).  Called in
-- the claim transaction with the conversation row locked, after the claim
-- checked that the session is not on another live runner
-- (agent._session_elsewhere): one that is on another host here is on a
-- runner that is gone, draining or removed, and is rebuilt on this one from
-- the files the database keeps (reason runner_gone).  Returns the session
-- and whether its workspace is new.
CREATE FUNCTION agent._session_for(inv agent.invocations, runner uuid,
								   OUT session_id uuid, OUT generation integer, OUT fresh boolean)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	s		agent.sessions;
	v_hash	text := agent._skills_hash(inv.agent_id);
	v_why	text;
	v_prev	uuid;
BEGIN
	PERFORM agent._trim_session_disk(inv.org_id, inv.conversation_id);
	SELECT * INTO s FROM agent.sessions x
	 WHERE x.conversation_id = inv.conversation_id AND x.state = 'active' FOR UPDATE;
	IF FOUND THEN
		v_prev := s.runner_id;
		IF s.runner_id IS DISTINCT FROM _session_for.runner THEN
			v_why := 'runner_gone';
		ELSIF s.last_used_at < now() - agent._setting('session_idle_timeout')::interval THEN
			v_why := 'expired';
		ELSIF s.skills_hash <> v_hash THEN
			v_why := 'skills_changed';
		END IF;
		IF v_why IS NULL THEN
			UPDATE agent.sessions x SET last_used_at = now() WHERE x.id = s.id;
			session_id := s.id;
			generation := s.generation;
			fresh := false;
			RETURN;
		END IF;
		UPDATE agent.sessions x SET state = 'ended', end_reason = v_why, ended_at = now()
		 WHERE x.id = s.id;
	END IF;

	INSERT INTO agent.sessions (org_id, workspace_id, conversation_id, generation, skills_hash,
								runner_id)
	VALUES (inv.org_id, inv.workspace_id, inv.conversation_id,
			coalesce((SELECT max(x.generation) FROM agent.sessions x
					   WHERE x.conversation_id = inv.conversation_id), 0) + 1,
			v_hash, _session_for.runner)
	RETURNING * INTO s;
	PERFORM agent._audit(inv.org_id, inv.workspace_id,
						 CASE WHEN v_why IS NULL AND s.generation = 1 THEN 'session.created'
							  ELSE 'session.rebuilt' END,
						 inv.id, 'supervisor',
						 jsonb_build_object('session_id', s.id, 'generation', s.generation,
											'conversation_id', inv.conversation_id,
											'reason', coalesce(v_why,
															   CASE WHEN s.generation = 1 THEN 'new'
																	ELSE 'ended' END),
											'runner_id', _session_for.runner)
						 || CASE WHEN v_why = 'runner_gone'
								 THEN jsonb_build_object('previous_runner_id', v_prev)
								 ELSE '{}'::jsonb END);
	session_id := s.id;
	generation := s.generation;
	fresh := true;
END
$$;

-- The files to write into an invocation's workspace before it runs: the
-- conversation's current files the session does not hold yet.  Marks them
-- as held.
CREATE FUNCTION agent._files_to_place(invocation uuid)
	RETURNS TABLE (name text, content bytea)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	r agent.invocations;
	f agent.files;
BEGIN
	SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation;
	IF r.session_id IS NULL THEN
		RETURN;
	END IF;
	FOR f IN
		SELECT * FROM agent._current_files(r.conversation_id) cf
		 WHERE NOT EXISTS (SELECT 1 FROM agent.session_files sf
							WHERE sf.session_id = r.session_id AND sf.file_id = cf.id)
		 ORDER BY cf.name
	LOOP
		INSERT INTO agent.session_files (session_id, file_id) VALUES (r.session_id, f.id);
		name := f.name;
		content := f.content;
		RETURN NEXT;
	END LOOP;
END
$$;

-- Keep the session workspaces of an org within max_session_disk_per_org:
-- end its least recently used idle sessions (not `keep`'s, none with a run
-- in flight) until what the others held after their last run fits.  Their
-- files stay in the database and are put back if the conversation runs
-- again; the supervisor deletes the workspaces.
CREATE FUNCTION agent._trim_session_disk(org uuid, keep uuid) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_budget	bigint := agent._setting('max_session_disk_per_org')::bigint;
	v_total		bigint;
	s			agent.sessions;
	n			integer := 0;
BEGIN
	SELECT coalesce(sum(x.disk_bytes), 0)::bigint INTO v_total FROM agent.sessions x
	 WHERE x.org_id = org AND x.state = 'active';
	IF v_total <= v_budget THEN
		RETURN 0;
	END IF;
	FOR s IN
		SELECT x.* FROM agent.sessions x
		 WHERE x.org_id = org AND x.state = 'active' AND x.conversation_id IS DISTINCT FROM keep
		   AND NOT EXISTS (SELECT 1 FROM agent.invocations i
							WHERE i.conversation_id = x.conversation_id
							  AND i.state IN ('provisioning', 'running'))
		 ORDER BY x.last_used_at
		   FOR UPDATE SKIP LOCKED
	LOOP
		EXIT WHEN v_total <= v_budget;
		UPDATE agent.sessions x SET state = 'ended', end_reason = 'disk_budget', ended_at = now()
		 WHERE x.id = s.id;
		PERFORM agent._audit(s.org_id, s.workspace_id, 'session.ended', NULL, 'supervisor',
							 jsonb_build_object('session_id', s.id, 'generation', s.generation,
												'conversation_id', s.conversation_id,
												'reason', 'disk_budget', 'disk_bytes', s.disk_bytes,
												'org_disk_bytes', v_total, 'budget', v_budget));
		v_total := v_total - s.disk_bytes;
		n := n + 1;
	END LOOP;
	RETURN n;
END
$$;

-- A session's bookkeeping after one of its runs, in the finishing
-- transaction: idle time counts from now; what the workspace holds; and,
-- when the run left it over its limits (reset names why), the session ends
-- so that the next run gets a fresh workspace with the conversation's
-- files put back, never a workspace it cannot start in.
CREATE FUNCTION agent._session_after_run(r agent.invocations, disk_bytes bigint,
										 disk_entries integer, reset text)
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	s agent.sessions;
BEGIN
	UPDATE agent.sessions x
	   SET last_used_at = now(),
		   disk_bytes = coalesce(_session_after_run.disk_bytes, x.disk_bytes),
		   disk_entries = coalesce(_session_after_run.disk_entries, x.disk_entries)
	 WHERE x.id = r.session_id AND x.state = 'active'
	RETURNING * INTO s;
	IF FOUND AND reset IS NOT NULL THEN
		UPDATE agent.sessions x SET state = 'ended', end_reason = 'workspace_over_limit', ended_at = now()
		 WHERE x.id = s.id;
		PERFORM agent._audit(s.org_id, s.workspace_id, 'session.ended', r.id, 'supervisor',
							 jsonb_build_object('session_id', s.id, 'generation', s.generation,
												'conversation_id', s.conversation_id,
												'reason', 'workspace_over_limit', 'detail', reset,
												'disk_bytes', disk_bytes, 'disk_entries', disk_entries));
	END IF;
END
$$;

-- Stage one file a run produced (or could not return) with its result,
-- before agent.runner_finish(); it reaches agent.files when the result
-- is applied.  Fenced: nothing (NULL) once the run is no longer in flight.
CREATE FUNCTION agent._store_produced_file(invocation uuid, name text, status text,
										   reason text, content bytea)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_seq integer;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM agent.invocations i
					WHERE i.id = invocation AND i.state IN ('provisioning', 'running')) THEN
		RETURN NULL;
	END IF;
	SELECT coalesce(max(x.seq), 0) + 1 INTO v_seq FROM agent.run_result_files x
	 WHERE x.invocation_id = invocation;
	INSERT INTO agent.run_result_files (invocation_id, seq, name, status, reason, content)
	VALUES (invocation, v_seq, coalesce(name, '?'), status, reason, content);
	RETURN v_seq;
END
$$;

-- Stage, in one statement, the entries a run left that it does not return
-- (status skipped or failed, a reason, no content), numbered after what is
-- staged already: a run may report some ten thousand of them.
CREATE FUNCTION agent._store_skipped_files(invocation uuid, names text[], statuses text[],
										   reasons text[])
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_seq	integer;
	n		integer;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM agent.invocations i
					WHERE i.id = invocation AND i.state IN ('provisioning', 'running')) THEN
		RETURN NULL;
	END IF;
	SELECT coalesce(max(x.seq), 0) INTO v_seq FROM agent.run_result_files x
	 WHERE x.invocation_id = invocation;
	INSERT INTO agent.run_result_files (invocation_id, seq, name, status, reason, content)
	SELECT invocation, v_seq + u.o::integer, coalesce(u.name, '?'), u.status, u.reason, NULL
	  FROM unnest(names, statuses, reasons) WITH ORDINALITY AS u(name, status, reason, o);
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

-- Record one file a run returned, when its result is applied: a saved file
-- counts against the org's storage quota (past it, the file is recorded as
-- skipped, with the reason).
CREATE FUNCTION agent._save_produced_file(r agent.invocations, name text, status text,
										  reason text, content bytea)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_id	uuid;
	v_name	text := name;
BEGIN
	-- A name the host cannot represent as text is recorded, not dropped.
	IF v_name IS NULL OR NOT agent.valid_relative_path(v_name) THEN
		status := 'skipped';
		reason := coalesce(reason || '; ', '') || 'invalid file name';
		content := NULL;
		v_name := '?';
	END IF;
	IF status = 'saved' AND NOT agent._storage_fits(r.org_id, octet_length(content)) THEN
		status := 'skipped';
		reason := format('the organization''s storage quota (%s bytes) is exhausted',
						 agent._org_storage_limit(r.org_id));
	END IF;
	IF status = 'saved' THEN
		PERFORM agent._use_storage(r.org_id, octet_length(content), format('file "%s"', v_name), true);
	END IF;
	INSERT INTO agent.files (org_id, workspace_id, conversation_id, invocation_id, name, origin,
							 status, reason, content, size, sha256, content_type, created_by)
	VALUES (r.org_id, r.workspace_id, r.conversation_id, r.id, v_name, 'produced', status,
			CASE WHEN status = 'saved' THEN NULL ELSE reason END,
			CASE WHEN status = 'saved' THEN content END,
			octet_length(content),
			CASE WHEN status = 'saved' THEN encode(sha256(content), 'hex') END,
			CASE WHEN status = 'saved' THEN agent.content_type_of(v_name) END,
			'supervisor')
	RETURNING id INTO v_id;
	IF status = 'saved' AND r.session_id IS NOT NULL THEN
		-- The workspace already holds it: do not write it back next time.
		INSERT INTO agent.session_files (session_id, file_id) VALUES (r.session_id, v_id);
	END IF;
	RETURN v_id;
END
$$;

-- End sessions idle for longer than session_idle_timeout (or as of a given
-- time) whose conversation has nothing provisioning or running.  Their
-- workspaces are deleted by the supervisor (woken at commit).  Scheduled
-- with pg_cron when it is installed.
CREATE FUNCTION agent.expire_idle_sessions(as_of timestamptz DEFAULT now())
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	s	agent.sessions;
	n	integer := 0;
BEGIN
	as_of := coalesce(as_of, now());	-- like expire_pending_approvals()
	FOR s IN
		SELECT x.* FROM agent.sessions x
		  JOIN agent.conversations c ON c.id = x.conversation_id
		 WHERE x.state = 'active'
		   AND x.last_used_at < as_of - agent._setting('session_idle_timeout')::interval
		   FOR NO KEY UPDATE OF x, c SKIP LOCKED
	LOOP
		IF EXISTS (SELECT 1 FROM agent.invocations i
					WHERE i.conversation_id = s.conversation_id
					  AND i.state IN ('provisioning', 'running')) THEN
			CONTINUE;
		END IF;
		UPDATE agent.sessions x SET state = 'ended', end_reason = 'expired', ended_at = now()
		 WHERE x.id = s.id;
		PERFORM agent._audit(s.org_id, s.workspace_id, 'session.expired', NULL, 'system',
							 jsonb_build_object('session_id', s.id, 'generation', s.generation,
												'conversation_id', s.conversation_id,
												'idle_since', s.last_used_at));
		n := n + 1;
	END LOOP;
	IF n > 0 THEN
		PERFORM agent._wake_supervisor();
	END IF;
	RETURN n;
END
$$;
COMMENT ON FUNCTION agent.expire_idle_sessions(timestamptz) IS
	'end idle conversation sessions; the supervisor deletes their workspaces';

-- ----------------------------------------------------------------------
-- Security
-- ----------------------------------------------------------------------

ALTER TABLE agent.skills ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.skill_files ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.agent_skills ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.files ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.session_files ENABLE ROW LEVEL SECURITY;

CREATE POLICY backend_org ON agent.skills FOR SELECT TO agent_backend
	USING (org_id = agent.current_org());
CREATE POLICY backend_org ON agent.skill_files FOR SELECT TO agent_backend
	USING (EXISTS (SELECT 1 FROM agent.skills s WHERE s.id = skill_id AND s.org_id = agent.current_org()));
CREATE POLICY backend_workspace ON agent.agent_skills FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.sessions FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.files FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());

CREATE POLICY auditor_read ON agent.skills FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.skill_files FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.agent_skills FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.sessions FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.files FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.session_files FOR SELECT TO agent_auditor USING (true);

GRANT SELECT ON agent.skills, agent.skill_files, agent.agent_skills, agent.sessions, agent.files
	TO agent_backend;
GRANT SELECT ON agent.skills, agent.skill_files, agent.agent_skills, agent.sessions, agent.files,
	agent.session_files TO agent_auditor;

REVOKE ALL ON FUNCTION agent._session_for(agent.invocations, uuid), agent._files_to_place(uuid),
	agent._store_produced_file(uuid, text, text, text, bytea),
	agent._store_skipped_files(uuid, text[], text[], text[]),
	agent._save_produced_file(agent.invocations, text, text, text, bytea),
	agent._session_after_run(agent.invocations, bigint, integer, text),
	agent._trim_session_disk(uuid, uuid), agent.expire_idle_sessions(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.upload_file(uuid, text, bytea, text, text),
	agent.list_files(uuid), agent.download_file(uuid), agent.delete_file(uuid, text, text),
	agent.delete_skill(uuid, text), agent.create_skill(text, jsonb, text),
	agent.set_agent_skill(uuid, uuid, boolean), agent.valid_relative_path(text),
	agent.content_type_of(text) TO agent_backend;
