-- Sandbox images (docs/images.md): what a run's sandbox sees as its
-- system directories.  "host" (no image: the runner host's own /usr) is
-- the default, always allowed, and needs no configuration; any other image
-- is a root file system built by the operator's tool (sandbox-image) on
-- each runner host, named and versioned by the sha256 of its manifest.
--
--   agent.images         every image (name, digest) a runner reported,
--                        with its manifest: what the card shows
--   agent.runner_images  which runner holds which digest, as it reported
--                        them (agent.runner_report_images)
--   agent.image_grants   which images an org may use: its plan's and its
--                        own (the operator: agent.enable_image)
--   agent.agent_images   an agent's default image (the backend:
--                        agent.set_agent_image); a request may name another
--
-- A run's image is chosen when it is requested (agent._image_choose): the
-- request's, else its agent's, else host; an image the org may not use is
-- a refusal.  Its digest is fixed then (the newest a live runner holds),
-- copied into the invocation, frozen, shown on the card with its
-- interpreter's version from the manifest, and bound to the approval
-- (approved_image_digest).  The claim gives the run only to a runner that
-- holds that digest (agent._image_claimable, the claim's one call); while
-- none does, agent.queue_status() says so (agent._image_wait).

CREATE TABLE agent.images (
	name			text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$' AND name <> 'host'),
	digest			text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
	-- as sandbox-image wrote it: "kind<TAB>name<TAB>version" lines; its
	-- sha256 is the digest (checked when it is reported)
	manifest		text NOT NULL,
	python_version	text,
	node_version	text,
	bash_version	text,
	first_reported_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (name, digest)
);
COMMENT ON TABLE agent.images IS
	'sandbox images the runners reported: name, digest (sha256 of the manifest), manifest';

CREATE TABLE agent.runner_images (
	runner_id		uuid NOT NULL REFERENCES agent.runners (id),
	name			text NOT NULL,
	digest			text NOT NULL,
	reported_at		timestamptz NOT NULL DEFAULT now(),	-- first, by this runner
	PRIMARY KEY (runner_id, name, digest),
	FOREIGN KEY (name, digest) REFERENCES agent.images (name, digest)
);
COMMENT ON TABLE agent.runner_images IS
	'the images each runner holds, as it last reported them';
-- the claim's and the queue's question: who holds this digest?
CREATE INDEX runner_images_digest_idx ON agent.runner_images (digest);

CREATE TABLE agent.image_grants (
	plan			text REFERENCES agent.plans (plan),
	org_id			uuid REFERENCES agent.orgs (id),
	image_name		text NOT NULL CHECK (image_name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'
										 AND image_name <> 'host'),
	granted_by		text NOT NULL,
	granted_at		timestamptz NOT NULL DEFAULT now(),
	CHECK ((plan IS NULL) <> (org_id IS NULL)),
	UNIQUE NULLS NOT DISTINCT (plan, org_id, image_name)
);
COMMENT ON TABLE agent.image_grants IS
	'which images the orgs of a plan, or one org, may use (host needs none)';

CREATE TABLE agent.agent_images (
	agent_id		uuid PRIMARY KEY,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	image_name		text NOT NULL CHECK (image_name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'
										 AND image_name <> 'host'),
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id)
);
COMMENT ON TABLE agent.agent_images IS
	'the default image of an agent''s runs (no row: host)';

ALTER TABLE agent.images ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.runner_images ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.image_grants ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.agent_images ENABLE ROW LEVEL SECURITY;
CREATE POLICY auditor_read ON agent.images FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.runner_images FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.image_grants FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.agent_images FOR SELECT TO agent_auditor USING (true);

-- ---- the manifest ------------------------------------------------------------

-- A field of a manifest: the version of the line "kind<TAB>name<TAB>version"
-- (interpreter python, debian nodejs, image name...), or NULL.
CREATE FUNCTION agent._image_manifest_field(manifest text, kind text, name text) RETURNS text
	LANGUAGE sql IMMUTABLE
	SET search_path = pg_catalog, pg_temp
	RETURN (SELECT split_part(l, E'\t', 3)
			  FROM regexp_split_to_table(manifest, E'\n') l
			 WHERE split_part(l, E'\t', 1) = kind AND split_part(l, E'\t', 2) = name
			 LIMIT 1);

-- What the card says runs the code: the interpreter of the language and
-- its version, from the image's manifest ("python 3.11.2").
CREATE FUNCTION agent._image_runtime(name text, digest text, language text) RETURNS text
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
	RETURN (SELECT CASE language
					   WHEN 'python' THEN 'python ' || im.python_version
					   WHEN 'node' THEN 'node ' || im.node_version
					   ELSE 'bash ' || im.bash_version END
			  FROM agent.images im
			 WHERE im.name = _image_runtime.name AND im.digest = _image_runtime.digest);

-- ---- runners: what they hold -------------------------------------------------

-- The runner's images (agent_runner), all of them: a JSON array of
-- {"name", "digest", "manifest"}, as sandbox-image left them in its store.
-- Called after each registration and whenever the store changed; what the
-- runner no longer lists, it no longer holds (its runs of it are claimed
-- by others).  Each digest must be the sha256 of its manifest, whose name
-- must be the image's.  Returns how many it holds now.
CREATE FUNCTION agent.runner_report_images(runner uuid, incarnation uuid, images jsonb)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn		agent.runners := agent._runner_current(runner, incarnation);
	e		jsonb;
	v_name	text;
	v_digest text;
	v_manifest text;
	v_held	text[] := '{}'::text[];
BEGIN
	IF images IS NULL OR jsonb_typeof(images) <> 'array' THEN
		RAISE EXCEPTION 'images must be a JSON array' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF jsonb_array_length(images) > 64 THEN
		RAISE EXCEPTION 'a runner may report at most 64 images' USING ERRCODE = 'program_limit_exceeded';
	END IF;
	FOR e IN SELECT x FROM jsonb_array_elements(images) x LOOP
		v_name := e ->> 'name';
		v_digest := e ->> 'digest';
		v_manifest := e ->> 'manifest';
		IF jsonb_typeof(e) <> 'object' OR v_name IS NULL OR v_digest IS NULL OR v_manifest IS NULL THEN
			RAISE EXCEPTION 'invalid image report'
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = 'Each image is an object with a name, a digest and a manifest.';
		END IF;
		IF v_name !~ '^[a-z0-9][a-z0-9._-]{0,62}$' OR v_name = 'host' THEN
			RAISE EXCEPTION 'invalid image name "%"', agent._shown(v_name)
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		IF octet_length(v_manifest) > 1048576 THEN
			RAISE EXCEPTION 'the manifest of image "%" is larger than 1 MB', v_name
				USING ERRCODE = 'program_limit_exceeded';
		END IF;
		IF v_digest !~ '^[0-9a-f]{64}$'
		   OR v_digest <> encode(sha256(convert_to(v_manifest, 'UTF8')), 'hex') THEN
			RAISE EXCEPTION 'the digest of image "%" is not the sha256 of its manifest', v_name
				USING ERRCODE = 'data_corrupted',
					  HINT = 'Rebuild the image with sandbox-image; its manifest must not be edited.';
		END IF;
		IF agent._image_manifest_field(v_manifest, 'image', 'name') IS DISTINCT FROM v_name THEN
			RAISE EXCEPTION 'the manifest of image "%" names another image', v_name
				USING ERRCODE = 'data_corrupted';
		END IF;
		INSERT INTO agent.images AS im (name, digest, manifest, python_version, node_version,
										bash_version)
		VALUES (v_name, v_digest, v_manifest,
				agent._image_manifest_field(v_manifest, 'interpreter', 'python'),
				agent._image_manifest_field(v_manifest, 'interpreter', 'node'),
				agent._image_manifest_field(v_manifest, 'interpreter', 'bash'))
		ON CONFLICT (name, digest) DO NOTHING;
		v_held := array_append(v_held, v_name || '@' || v_digest);
	END LOOP;
	DELETE FROM agent.runner_images ri
	 WHERE ri.runner_id = rn.id AND NOT (ri.name || '@' || ri.digest) = ANY (v_held);
	INSERT INTO agent.runner_images (runner_id, name, digest)
	SELECT rn.id, split_part(h, '@', 1), split_part(h, '@', 2)
	  FROM unnest(v_held) h
	ON CONFLICT (runner_id, name, digest) DO NOTHING;	-- (reported_at: since when)
	RETURN (SELECT count(*)::integer FROM agent.runner_images ri WHERE ri.runner_id = rn.id);
END
$$;
COMMENT ON FUNCTION agent.runner_report_images(uuid, uuid, jsonb) IS
	'the images the calling runner holds (all of them); returns how many';

-- ---- the operator: which orgs may use which image -------------------------------

-- Let the orgs of a plan, or one org, use an image (exactly one of plan and
-- org).  The image need not be built yet.  An org's grant is an event of
-- its audit chain (org.image_enabled).  True when it changed.
CREATE FUNCTION agent.enable_image(image text, plan text DEFAULT NULL, org uuid DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
	PERFORM agent._image_grant_args(image, plan, org);
	IF EXISTS (SELECT 1 FROM agent.image_grants g
				WHERE g.image_name = image AND g.plan IS NOT DISTINCT FROM plan
				  AND g.org_id IS NOT DISTINCT FROM org) THEN
		RETURN false;
	END IF;
	BEGIN
		INSERT INTO agent.image_grants (plan, org_id, image_name, granted_by)
		VALUES (plan, org, image, current_user::text);
	EXCEPTION WHEN unique_violation THEN
		RETURN false;			-- granted at the same time by another session
	END;
	IF org IS NOT NULL THEN
		PERFORM agent._audit(org, NULL, 'org.image_enabled', NULL, current_user::text,
							 jsonb_build_object('image', image));
	END IF;
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.enable_image(text, text, uuid) IS
	'let the orgs of a plan, or one org, use an image (the operator); true when it changed';

-- Withdraw a grant of enable_image.  Runs already requested keep their
-- image; new requests for it are refused.  True when it changed.
CREATE FUNCTION agent.disable_image(image text, plan text DEFAULT NULL, org uuid DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	n		integer;
BEGIN
	PERFORM agent._image_grant_args(image, plan, org);
	DELETE FROM agent.image_grants g
	 WHERE g.image_name = image AND g.plan IS NOT DISTINCT FROM plan
	   AND g.org_id IS NOT DISTINCT FROM org;
	GET DIAGNOSTICS n = ROW_COUNT;
	IF n = 0 THEN
		RETURN false;
	END IF;
	IF org IS NOT NULL THEN
		PERFORM agent._audit(org, NULL, 'org.image_disabled', NULL, current_user::text,
							 jsonb_build_object('image', image));
	END IF;
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.disable_image(text, text, uuid) IS
	'withdraw an image from the orgs of a plan, or one org (the operator); true when it changed';

-- enable_image's and disable_image's arguments, checked (raises).
CREATE FUNCTION agent._image_grant_args(image text, plan text, org uuid) RETURNS void
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
	IF image IS NULL THEN
		RAISE EXCEPTION 'image must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF image = 'host' THEN
		RAISE EXCEPTION 'the host image needs no grant'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Every org may run on the runner hosts'' own root.';
	END IF;
	IF image !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
		RAISE EXCEPTION 'invalid image name "%"', agent._shown(image)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use 1 to 63 characters: lower-case letters, digits, ".", "_" and "-", starting with a letter or digit.';
	END IF;
	IF (plan IS NULL) = (org IS NULL) THEN
		RAISE EXCEPTION 'exactly one of plan and org must be given' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF plan IS NOT NULL AND NOT EXISTS (SELECT 1 FROM agent.plans p WHERE p.plan = plan) THEN
		RAISE EXCEPTION 'plan "%" does not exist', agent._shown(plan)
			USING ERRCODE = 'no_data_found',
				  HINT = 'The plans are the rows of agent.plans.';
	END IF;
	IF org IS NOT NULL AND NOT EXISTS (SELECT 1 FROM agent.orgs o WHERE o.id = org) THEN
		RAISE EXCEPTION 'org % does not exist', org USING ERRCODE = 'no_data_found';
	END IF;
END
$$;

-- May the org use the image?  host: always.
CREATE FUNCTION agent._image_enabled(org uuid, image text) RETURNS boolean
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
	RETURN image = 'host'
		OR EXISTS (SELECT 1 FROM agent.image_grants g JOIN agent.orgs o ON o.id = _image_enabled.org
					WHERE g.image_name = _image_enabled.image
					  AND (g.org_id = o.id OR g.plan = o.plan));

-- ---- the backend: an agent's image, what the org may use --------------------------

-- An agent's default image (host: none).  The org must be allowed to use
-- it.  Event agent.changed (setting image).  True when it changed.
CREATE FUNCTION agent.set_agent_image(agent uuid, image text, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	a		agent.agents;
	v_old	text;
BEGIN
	PERFORM agent._require_tenant(true);
	IF agent IS NULL OR image IS NULL THEN
		RAISE EXCEPTION 'agent and image must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	SELECT * INTO a FROM agent.agents x
	 WHERE x.id = agent AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'agent % does not exist', agent
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	PERFORM agent._image_check_usable(a.org_id, image);
	v_old := coalesce((SELECT ai.image_name FROM agent.agent_images ai WHERE ai.agent_id = a.id), 'host');
	IF v_old = image THEN
		RETURN false;
	END IF;
	IF image = 'host' THEN
		DELETE FROM agent.agent_images ai WHERE ai.agent_id = a.id;
	ELSE
		INSERT INTO agent.agent_images AS ai (agent_id, org_id, workspace_id, image_name, set_by)
		VALUES (a.id, a.org_id, a.workspace_id, image, actor)
		ON CONFLICT (agent_id) DO UPDATE SET image_name = excluded.image_name,
											 set_by = excluded.set_by, set_at = now();
	END IF;
	PERFORM agent._audit(a.org_id, a.workspace_id, 'agent.changed', NULL, actor,
						 jsonb_build_object('agent_id', a.id, 'setting', 'image',
											'from', v_old, 'to', image));
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_agent_image(uuid, text, text) IS
	'the default image of an agent of the current workspace (host: none); true when it changed';

-- An image name the org may use, or an error: 22023 for a name no image
-- can have, 42501 for an image the org may not use.
CREATE FUNCTION agent._image_check_usable(org uuid, image text) RETURNS void
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF image <> 'host' AND image !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
		RAISE EXCEPTION 'invalid image name "%"', agent._shown(image)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use 1 to 63 characters: lower-case letters, digits, ".", "_" and "-", starting with a letter or digit.';
	END IF;
	IF NOT agent._image_enabled(org, image) THEN
		RAISE EXCEPTION 'image "%" is not enabled for this organization', image
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'The platform''s operator enables images per plan or org (agent.enable_image).';
	END IF;
END
$$;

-- The images the current org may use, with the digest a request would get
-- now, its interpreters and how many live runners hold it (host first:
-- always there, the runner hosts' own root).
CREATE FUNCTION agent.available_images()
	RETURNS TABLE (image text, digest text, python_version text, node_version text,
				   runners integer)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_org	uuid := agent.current_org();
BEGIN
	PERFORM agent._require_tenant(false);
	image := 'host';
	digest := NULL;
	python_version := NULL;
	node_version := NULL;
	runners := (SELECT count(*)::integer FROM agent.runners rn
				 WHERE rn.state = 'active' AND rn.last_heartbeat >= now() - agent._runner_lease());
	RETURN NEXT;
	RETURN QUERY
		SELECT n.name, c.digest, im.python_version, im.node_version,
			   (SELECT count(*)::integer FROM agent.runner_images ri JOIN agent.runners rn ON rn.id = ri.runner_id
				 WHERE ri.name = n.name AND ri.digest = c.digest AND rn.state = 'active'
				   AND rn.last_heartbeat >= now() - agent._runner_lease())
		  FROM (SELECT DISTINCT g.image_name AS name FROM agent.image_grants g JOIN agent.orgs o ON o.id = v_org
				 WHERE g.org_id = o.id OR g.plan = o.plan) n
		  CROSS JOIN LATERAL agent._image_current(n.name) c
		  LEFT JOIN agent.images im ON im.name = n.name AND im.digest = c.digest
		 ORDER BY n.name;
END
$$;
COMMENT ON FUNCTION agent.available_images() IS
	'the images the current org may use: digest a request gets now, interpreters, live runners holding it';

-- ---- the request: which image, which digest --------------------------------------

-- The digest a request for an image gets now: the newest (first reported
-- last) that a live active runner holds; else the newest any runner ever
-- reported (the run then waits for a runner to hold it); NULL: never
-- built anywhere.
CREATE FUNCTION agent._image_current(name text, OUT digest text)
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
	RETURN (SELECT im.digest
			  FROM agent.images im
			 WHERE im.name = _image_current.name
			 ORDER BY EXISTS (SELECT 1 FROM agent.runner_images ri JOIN agent.runners rn ON rn.id = ri.runner_id
							   WHERE ri.name = im.name AND ri.digest = im.digest
								 AND rn.state = 'active'
								 AND rn.last_heartbeat >= now() - agent._runner_lease()) DESC,
					  im.first_reported_at DESC, im.digest
			 LIMIT 1);

-- A request's image (request_execution): the one it names, else its
-- agent's, else host (name and digest NULL).  A name no image can have is
-- an error (22023, raised); an image the org may not use, or one no runner
-- ever reported, is a refusal (reason, sqlstate and message set, name
-- kept for the event).
CREATE FUNCTION agent._image_choose(org uuid, agent_id uuid, requested text,
									OUT name text, OUT digest text, OUT reason text,
									OUT sqlstate text, OUT message text)
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	name := coalesce(requested,
					 (SELECT ai.image_name FROM agent.agent_images ai WHERE ai.agent_id = _image_choose.agent_id),
					 'host');
	IF name = 'host' THEN
		name := NULL;
		RETURN;
	END IF;
	IF name !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
		RAISE EXCEPTION 'invalid image name "%"', agent._shown(name)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use host, or the name of an image agent.available_images() lists.';
	END IF;
	IF NOT agent._image_enabled(org, name) THEN
		reason := 'image_not_enabled';
		sqlstate := '42501';
		message := format('The image "%s" is not enabled for this organization.', name);
		RETURN;
	END IF;
	digest := (SELECT c.digest FROM agent._image_current(name) c);
	IF digest IS NULL THEN
		reason := 'image_unavailable';
		sqlstate := '55000';
		message := format('No runner has reported the image "%s"; the operator builds it with sandbox-image.', name);
	END IF;
END
$$;

-- Copied at request time (request_execution), never changed afterwards:
-- the approval covers this digest.
CREATE FUNCTION agent._invocations_freeze_image() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	RAISE EXCEPTION 'cannot change the image of invocation %', OLD.id
		USING ERRCODE = 'object_not_in_prerequisite_state',
			  DETAIL = 'The image and its digest are fixed when the execution is requested and bound to its approval.',
			  HINT = 'Request a new execution to run on another image.';
END
$$;
CREATE TRIGGER invocations_freeze_image
	BEFORE UPDATE OF image_name, image_digest ON agent.invocations
	FOR EACH ROW WHEN ((OLD.image_name, OLD.image_digest) IS DISTINCT FROM
					   (NEW.image_name, NEW.image_digest))
	EXECUTE FUNCTION agent._invocations_freeze_image();

-- ---- the claim and the queue ---------------------------------------------------

-- May this runner take this approved run (the claim's one call,
-- 42_claim.sql)?  A host run: any runner.  An image's: only a runner
-- that holds its digest (none without a runner).  The digest must be the
-- one its approval was bound to: otherwise the row was rewritten past the
-- freeze, and this raises (the claim then fails the run, uncharged).
CREATE FUNCTION agent._image_claimable(r agent.invocations, runner uuid) RETURNS boolean
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF r.image_digest IS NULL AND r.image_name IS NULL THEN
		RETURN true;
	END IF;
	IF r.image_digest IS DISTINCT FROM (SELECT a.approved_image_digest FROM agent.approval_requests a
										 WHERE a.id = r.approval_id AND a.invocation_id = r.id) THEN
		RAISE EXCEPTION 'the image of invocation % is not the one its approval covers', r.id
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	RETURN runner IS NOT NULL
		AND EXISTS (SELECT 1 FROM agent.runner_images ri
					 WHERE ri.runner_id = runner AND ri.name = r.image_name
					   AND ri.digest = r.image_digest);
END
$$;

-- Why an approved run of an image waits, for agent.queue_status(): no live
-- active runner with slots holds its digest.  NULL: its image does not
-- hold it back.
CREATE FUNCTION agent._image_wait(image_name text, image_digest text) RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF image_digest IS NULL
	   OR EXISTS (SELECT 1 FROM agent.runner_images ri JOIN agent.runners rn ON rn.id = ri.runner_id
				   WHERE ri.name = _image_wait.image_name AND ri.digest = _image_wait.image_digest
					 AND rn.state = 'active' AND agent._runner_slots(rn) > 0
					 AND rn.last_heartbeat >= now() - agent._runner_lease()) THEN
		RETURN NULL;
	END IF;
	RETURN format('no live runner holds the image %s@%s', image_name, left(image_digest, 12));
END
$$;

-- (99_privileges.sql takes EXECUTE from PUBLIC on every function of agent)
GRANT EXECUTE ON FUNCTION agent.set_agent_image(uuid, text, text), agent.available_images()
	TO agent_backend;
GRANT EXECUTE ON FUNCTION agent.runner_report_images(uuid, uuid, jsonb) TO agent_runner;
