-- Setup through functions: orgs, plans and models (the operator's, i.e.
-- the owner's), workspaces and org policy (the admin's), agents and
-- conversations (the backend's).  Neither role writes these tables directly: a
-- table-level write grant would let it LOCK a table every tenant and the
-- supervisor read, take row locks, choose primary keys (an existence
-- oracle across tenants), or change what it is not meant to (an agent's
-- kind, the org's policy) and so pass the IAM checks it is subject to.
--
-- Every function here takes the tenant from agent.set_tenant(), makes the
-- ids it creates, names the person acting (agent._require_person), and
-- writes one audit event per change in the org's chain, in the same
-- transaction.  Setters return whether the value changed; setting a value
-- it already has writes nothing.  An id of another tenant is reported
-- exactly like an id that does not exist.
--
-- The events count against the org's storage quota (14_limits.sql; the
-- names and titles they record are counted there): a tenant's change that
-- takes the org past its quota is refused (53400), all of it rolled back,
-- except a change that only narrows what may run (a toggle or a policy
-- turned to its safe side), which an org over its quota must still be able
-- to make.
--
-- Row locks are FOR NO KEY UPDATE (a plain UPDATE of non-key columns takes
-- the same): the foreign-key checks of other inserts (invocations of an
-- agent, files of a conversation) take FOR KEY SHARE and do not wait.

-- ----------------------------------------------------------------------
-- Agents and conversations (agent_backend)
-- ----------------------------------------------------------------------

-- Create an agent in the current workspace and return its id.  Its kind is
-- fixed from now on; only a personal agent has an owner (a person).
CREATE FUNCTION agent.create_agent(name text, kind text, model uuid, created_by text,
								   owner text DEFAULT NULL,
								   code_execution_enabled boolean DEFAULT false,
								   file_upload_enabled boolean DEFAULT false)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_org	uuid := agent.current_org();
	v_ws	uuid := agent.current_workspace();
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(true);
	IF name IS NULL OR kind IS NULL OR code_execution_enabled IS NULL
	   OR file_upload_enabled IS NULL THEN
		RAISE EXCEPTION 'name, kind and the toggles must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	IF btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._require_person(created_by, 'created_by');
	IF kind NOT IN ('specialist', 'shared', 'personal') THEN
		RAISE EXCEPTION 'invalid agent kind "%"', agent._shown(kind)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use specialist, shared or personal.';
	END IF;
	IF kind = 'personal' THEN
		PERFORM agent._require_person(owner, 'owner');
	ELSIF owner IS NOT NULL THEN
		RAISE EXCEPTION 'a % agent has no owner', kind
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Only a personal agent belongs to a person; pass owner => NULL.';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.workspaces w WHERE w.id = v_ws AND w.org_id = v_org) THEN
		RAISE EXCEPTION 'workspace % does not exist', v_ws
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the tenant set with agent.set_tenant().';
	END IF;
	IF model IS NOT NULL AND NOT EXISTS (SELECT 1 FROM agent.models m WHERE m.id = model) THEN
		RAISE EXCEPTION 'model % does not exist', model USING ERRCODE = 'no_data_found';
	END IF;

	INSERT INTO agent.agents (org_id, workspace_id, name, kind, owner, model_id,
							  code_execution_enabled, file_upload_enabled)
	VALUES (v_org, v_ws, name, kind, owner, model, code_execution_enabled, file_upload_enabled)
	RETURNING agents.id INTO v_id;
	PERFORM agent._audit(v_org, v_ws, 'agent.created', NULL, created_by,
		pg_catalog.jsonb_build_object('agent_id', v_id, 'name', name, 'kind', kind,
									  'owner', owner, 'model_id', model,
									  'code_execution_enabled', code_execution_enabled,
									  'file_upload_enabled', file_upload_enabled));
	PERFORM agent._check_storage(v_org, format('agent "%s"', agent._shown(name)));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_agent(text, text, uuid, text, text, boolean, boolean) IS
	'create an agent in the current workspace; returns its id (its kind is fixed from then on)';

-- Create a conversation (thread) of an agent of the current workspace and
-- return its id.
CREATE FUNCTION agent.create_conversation(agent uuid, created_by text, title text DEFAULT NULL,
										  code_execution_enabled boolean DEFAULT false)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_org	uuid := agent.current_org();
	v_ws	uuid := agent.current_workspace();
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(true);
	IF agent IS NULL OR code_execution_enabled IS NULL THEN
		RAISE EXCEPTION 'agent and code_execution_enabled must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(created_by, 'created_by');
	PERFORM agent._check_text(title, 'title', 'title');
	-- Another tenant's agent is indistinguishable from a missing one.
	IF NOT EXISTS (SELECT 1 FROM agent.agents a
					WHERE a.id = agent AND a.org_id = v_org AND a.workspace_id = v_ws) THEN
		RAISE EXCEPTION 'agent % does not exist', agent
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;

	INSERT INTO agent.conversations (org_id, workspace_id, agent_id, title, created_by,
									 code_execution_enabled)
	VALUES (v_org, v_ws, agent, title, created_by, code_execution_enabled)
	RETURNING conversations.id INTO v_id;
	PERFORM agent._audit(v_org, v_ws, 'conversation.created', NULL, created_by,
		pg_catalog.jsonb_build_object('conversation_id', v_id, 'agent_id', agent,
									  'title', title,
									  'code_execution_enabled', code_execution_enabled));
	PERFORM agent._check_storage(v_org, 'a new conversation');
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_conversation(uuid, text, text, boolean) IS
	'create a conversation of an agent of the current workspace; returns its id';

-- Change an agent's toggles (NULL: leave as it is); one agent.changed event
-- per setting that changes.  Returns whether anything changed.  The one
-- place an agent row is updated, so the setters below and later ones
-- (name, model) share the tenant check, the lock and the audit.
CREATE FUNCTION agent._change_agent(agent uuid, actor text,
									code_execution_enabled boolean DEFAULT NULL,
									file_upload_enabled boolean DEFAULT NULL,
									name text DEFAULT NULL,
									model uuid DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
	a		agent.agents;
	v_changes jsonb := '[]'::jsonb;
	v_narrows boolean := true;		-- every change takes something away
	c		jsonb;
BEGIN
	PERFORM agent._require_tenant(true);
	IF agent IS NULL THEN
		RAISE EXCEPTION 'agent must not be null' USING ERRCODE = 'null_value_not_allowed';
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
	IF code_execution_enabled IS DISTINCT FROM a.code_execution_enabled
	   AND code_execution_enabled IS NOT NULL THEN
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'code_execution_enabled',
			'from', a.code_execution_enabled, 'to', code_execution_enabled);
		v_narrows := v_narrows AND NOT code_execution_enabled;
	END IF;
	IF file_upload_enabled IS DISTINCT FROM a.file_upload_enabled
	   AND file_upload_enabled IS NOT NULL THEN
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'file_upload_enabled',
			'from', a.file_upload_enabled, 'to', file_upload_enabled);
		v_narrows := v_narrows AND NOT file_upload_enabled;
	END IF;
	IF name IS DISTINCT FROM a.name AND name IS NOT NULL THEN
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'name',
			'from', a.name, 'to', name);
		v_narrows := false;
	END IF;
	IF model IS DISTINCT FROM a.model_id AND model IS NOT NULL THEN
		IF NOT EXISTS (SELECT 1 FROM agent.models m WHERE m.id = model) THEN
			RAISE EXCEPTION 'model % does not exist', model USING ERRCODE = 'no_data_found';
		END IF;
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'model_id',
			'from', a.model_id, 'to', model);
		v_narrows := false;
	END IF;
	IF pg_catalog.jsonb_array_length(v_changes) = 0 THEN
		RETURN false;
	END IF;

	UPDATE agent.agents x
	   SET code_execution_enabled = coalesce(code_execution_enabled, x.code_execution_enabled),
		   file_upload_enabled = coalesce(file_upload_enabled, x.file_upload_enabled),
		   name = coalesce(_change_agent.name, x.name),
		   model_id = coalesce(model, x.model_id)
	 WHERE x.id = a.id;
	FOR c IN SELECT * FROM pg_catalog.jsonb_array_elements(v_changes) LOOP
		PERFORM agent._audit(a.org_id, a.workspace_id, 'agent.changed', NULL, actor,
								pg_catalog.jsonb_build_object('agent_id', a.id) || c);
	END LOOP;
	IF NOT v_narrows THEN
		PERFORM agent._check_storage(a.org_id, pg_catalog.format('the change of agent %s', a.id));
	END IF;
	RETURN true;
END
$$;

CREATE FUNCTION agent.set_agent_code_execution(agent uuid, enabled boolean, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF enabled IS NULL THEN
		RAISE EXCEPTION 'enabled must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN agent._change_agent(agent, actor, code_execution_enabled => enabled);
END
$$;
COMMENT ON FUNCTION agent.set_agent_code_execution(uuid, boolean, text) IS
	'turn code execution on or off for an agent of the current workspace; true when it changed';

CREATE FUNCTION agent.set_agent_file_upload(agent uuid, enabled boolean, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF enabled IS NULL THEN
		RAISE EXCEPTION 'enabled must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN agent._change_agent(agent, actor, file_upload_enabled => enabled);
END
$$;
COMMENT ON FUNCTION agent.set_agent_file_upload(uuid, boolean, text) IS
	'turn file uploads on or off for an agent of the current workspace; true when it changed';

-- An agent's name (what the approval card shows).
CREATE FUNCTION agent.set_agent_name(agent uuid, name text, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF name IS NULL THEN
		RAISE EXCEPTION 'name must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	IF pg_catalog.btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN agent._change_agent(agent, actor, name => name);
END
$$;
COMMENT ON FUNCTION agent.set_agent_name(uuid, text, text) IS
	'rename an agent of the current workspace; true when it changed';

-- An agent's model (the IAM decision reads whether it supports code
-- execution at every request).
CREATE FUNCTION agent.set_agent_model(agent uuid, model uuid, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF model IS NULL THEN
		RAISE EXCEPTION 'model must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN agent._change_agent(agent, actor, model => model);
END
$$;
COMMENT ON FUNCTION agent.set_agent_model(uuid, uuid, text) IS
	'change the model of an agent of the current workspace; true when it changed';

-- The per-thread toggle.
CREATE FUNCTION agent.set_conversation_code_execution(conversation uuid, enabled boolean,
													  actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c		agent.conversations;
BEGIN
	PERFORM agent._require_tenant(true);
	IF conversation IS NULL OR enabled IS NULL THEN
		RAISE EXCEPTION 'conversation and enabled must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	SELECT * INTO c FROM agent.conversations x
	 WHERE x.id = conversation AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	IF c.code_execution_enabled = enabled THEN
		RETURN false;
	END IF;
	UPDATE agent.conversations x SET code_execution_enabled = enabled WHERE x.id = c.id;
	PERFORM agent._audit(c.org_id, c.workspace_id, 'conversation.changed', NULL, actor,
		pg_catalog.jsonb_build_object('conversation_id', c.id, 'setting', 'code_execution_enabled',
									  'from', c.code_execution_enabled, 'to', enabled));
	IF enabled THEN		-- (turning it off narrows: never refused)
		PERFORM agent._check_storage(c.org_id, pg_catalog.format('the change of conversation %s', c.id));
	END IF;
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_conversation_code_execution(uuid, boolean, text) IS
	'turn code execution on or off for a conversation of the current workspace; true when it changed';

-- A conversation's title.
CREATE FUNCTION agent.set_conversation_title(conversation uuid, title text, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c		agent.conversations;
BEGIN
	PERFORM agent._require_tenant(true);
	IF conversation IS NULL THEN
		RAISE EXCEPTION 'conversation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	PERFORM agent._check_text(title, 'title', 'title');
	SELECT * INTO c FROM agent.conversations x
	 WHERE x.id = conversation AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	IF c.title IS NOT DISTINCT FROM title THEN
		RETURN false;
	END IF;
	UPDATE agent.conversations x SET title = set_conversation_title.title WHERE x.id = c.id;
	PERFORM agent._audit(c.org_id, c.workspace_id, 'conversation.changed', NULL, actor,
		pg_catalog.jsonb_build_object('conversation_id', c.id, 'setting', 'title',
									  'from', c.title, 'to', title));
	PERFORM agent._check_storage(c.org_id, pg_catalog.format('the new title of conversation %s', c.id));
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_conversation_title(uuid, text, text) IS
	'change the title of a conversation of the current workspace (NULL: none); true when it changed';

-- ----------------------------------------------------------------------
-- Workspaces (agent_admin)
-- ----------------------------------------------------------------------

-- Create a workspace in the org named by set_tenant(org, NULL); returns its
-- id.  Event workspace.created (org-wide).
CREATE FUNCTION agent.create_workspace(name text, actor text)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_org	uuid := agent.current_org();
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(false);
	IF name IS NULL THEN
		RAISE EXCEPTION 'name must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	IF pg_catalog.btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	IF NOT EXISTS (SELECT 1 FROM agent.orgs o WHERE o.id = v_org) THEN
		RAISE EXCEPTION 'org % does not exist', v_org USING ERRCODE = 'no_data_found';
	END IF;
	INSERT INTO agent.workspaces (org_id, name) VALUES (v_org, name)
	RETURNING workspaces.id INTO v_id;
	PERFORM agent._audit(v_org, NULL, 'workspace.created', NULL, actor,
		pg_catalog.jsonb_build_object('workspace_id', v_id, 'name', name));
	PERFORM agent._check_storage(v_org, pg_catalog.format('workspace "%s"', agent._shown(name)));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_workspace(text, text) IS
	'create a workspace in the current org (set_tenant(org, NULL)); returns its id';

CREATE FUNCTION agent.set_workspace_name(workspace uuid, name text, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	w	agent.workspaces;
BEGIN
	PERFORM agent._require_tenant(false);
	IF workspace IS NULL OR name IS NULL THEN
		RAISE EXCEPTION 'workspace and name must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	IF pg_catalog.btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	SELECT * INTO w FROM agent.workspaces x
	 WHERE x.id = workspace AND x.org_id = agent.current_org()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'workspace % does not exist', workspace
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the org set with agent.set_tenant() owns it.';
	END IF;
	IF w.name = name THEN
		RETURN false;
	END IF;
	UPDATE agent.workspaces x SET name = set_workspace_name.name WHERE x.id = w.id;
	PERFORM agent._audit(w.org_id, NULL, 'workspace.changed', NULL, actor,
		pg_catalog.jsonb_build_object('workspace_id', w.id, 'setting', 'name',
									  'from', w.name, 'to', name));
	PERFORM agent._check_storage(w.org_id, pg_catalog.format('the new name of workspace %s', w.id));
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_workspace_name(uuid, text, text) IS
	'rename a workspace of the current org; true when it changed';

-- ----------------------------------------------------------------------
-- Org policy (agent_admin)
-- ----------------------------------------------------------------------

-- Change the current org's policy (NULL: leave as it is); one
-- org.policy_changed event (org-wide, no workspace) per setting that
-- changes.  Returns whether anything changed.  The plan is not policy: it
-- stays the owner's.
CREATE FUNCTION agent._change_org_policy(actor text,
										 personal_agents_code_execution boolean DEFAULT NULL,
										 require_distinct_approver boolean DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
	o		agent.orgs;
	v_changes jsonb := '[]'::jsonb;
	v_narrows boolean := true;		-- every change takes something away
	c		jsonb;
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	SELECT * INTO o FROM agent.orgs x WHERE x.id = agent.current_org() FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'org % does not exist', agent.current_org()
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the tenant set with agent.set_tenant().';
	END IF;
	IF personal_agents_code_execution IS DISTINCT FROM o.personal_agents_code_execution
	   AND personal_agents_code_execution IS NOT NULL THEN
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'personal_agents_code_execution',
			'from', o.personal_agents_code_execution, 'to', personal_agents_code_execution);
		v_narrows := v_narrows AND NOT personal_agents_code_execution;
	END IF;
	IF require_distinct_approver IS DISTINCT FROM o.require_distinct_approver
	   AND require_distinct_approver IS NOT NULL THEN
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'require_distinct_approver',
			'from', o.require_distinct_approver, 'to', require_distinct_approver);
		v_narrows := v_narrows AND require_distinct_approver;
	END IF;
	IF pg_catalog.jsonb_array_length(v_changes) = 0 THEN
		RETURN false;
	END IF;

	UPDATE agent.orgs x
	   SET personal_agents_code_execution = coalesce(personal_agents_code_execution,
													 x.personal_agents_code_execution),
		   require_distinct_approver = coalesce(require_distinct_approver, x.require_distinct_approver)
	 WHERE x.id = o.id;
	FOR c IN SELECT * FROM pg_catalog.jsonb_array_elements(v_changes) LOOP
		PERFORM agent._audit(o.id, NULL, 'org.policy_changed', NULL, actor, c);
	END LOOP;
	IF NOT v_narrows THEN
		PERFORM agent._check_storage(o.id, 'the change of the organization''s policy');
	END IF;
	RETURN true;
END
$$;

-- The admin switch for code execution by the org's personal agents.
CREATE FUNCTION agent.set_personal_agents_code_execution(enabled boolean, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF enabled IS NULL THEN
		RAISE EXCEPTION 'enabled must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN agent._change_org_policy(actor, personal_agents_code_execution => enabled);
END
$$;
COMMENT ON FUNCTION agent.set_personal_agents_code_execution(boolean, text) IS
	'org policy: allow or forbid code execution by the current org''s personal agents; true when it changed';

-- Whether an approver must be someone other than the requester (on by
-- default).
CREATE FUNCTION agent.set_require_distinct_approver(enabled boolean, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF enabled IS NULL THEN
		RAISE EXCEPTION 'enabled must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN agent._change_org_policy(actor, require_distinct_approver => enabled);
END
$$;
COMMENT ON FUNCTION agent.set_require_distinct_approver(boolean, text) IS
	'org policy: require an approver other than the requester in the current org; true when it changed';

-- ----------------------------------------------------------------------
-- Orgs, plans and models (the operator: the owner; granted to no role)
-- ----------------------------------------------------------------------

-- Create an org on a plan; returns its id.  Event org.created (actor: the
-- operator's role, as for grant_credits).
CREATE FUNCTION agent.create_org(name text, plan text DEFAULT 'free')
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_id	uuid;
BEGIN
	IF name IS NULL OR plan IS NULL THEN
		RAISE EXCEPTION 'name and plan must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	IF pg_catalog.btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.plans p WHERE p.plan = plan) THEN
		RAISE EXCEPTION 'plan "%" does not exist', agent._shown(plan)
			USING ERRCODE = 'no_data_found',
				  HINT = 'The plans are the rows of agent.plans.';
	END IF;
	INSERT INTO agent.orgs (name, plan) VALUES (name, plan) RETURNING orgs.id INTO v_id;
	PERFORM agent._audit(v_id, NULL, 'org.created', NULL, current_user::text,
		pg_catalog.jsonb_build_object('name', name, 'plan', plan));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_org(text, text) IS
	'create an org on a plan (the operator); returns its id';

-- Move an org to another plan.  Event org.plan_changed.
CREATE FUNCTION agent.set_org_plan(org uuid, plan text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	o	agent.orgs;
BEGIN
	IF org IS NULL OR plan IS NULL THEN
		RAISE EXCEPTION 'org and plan must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.plans p WHERE p.plan = plan) THEN
		RAISE EXCEPTION 'plan "%" does not exist', agent._shown(plan)
			USING ERRCODE = 'no_data_found',
				  HINT = 'The plans are the rows of agent.plans.';
	END IF;
	SELECT * INTO o FROM agent.orgs x WHERE x.id = org FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'org % does not exist', org USING ERRCODE = 'no_data_found';
	END IF;
	IF o.plan = plan THEN
		RETURN false;
	END IF;
	UPDATE agent.orgs x SET plan = set_org_plan.plan WHERE x.id = o.id;
	PERFORM agent._audit(o.id, NULL, 'org.plan_changed', NULL, current_user::text,
		pg_catalog.jsonb_build_object('from', o.plan, 'to', plan));
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_org_plan(uuid, text) IS
	'move an org to another plan (the operator); true when it changed';

-- Models are global (not tenant data): no org's audit chain records them.
CREATE FUNCTION agent.create_model(name text, provider text DEFAULT NULL,
								   supports_code_execution boolean DEFAULT false)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_id	uuid;
	v_constraint text;
BEGIN
	IF name IS NULL OR supports_code_execution IS NULL THEN
		RAISE EXCEPTION 'name and supports_code_execution must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	PERFORM agent._check_text(provider, 'provider', 'provider');
	IF pg_catalog.btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	-- The check sees committed names; a concurrent create of the same name
	-- passes it and then waits on the unique index, which reports it when
	-- the other commits: the same error either way.
	IF EXISTS (SELECT 1 FROM agent.models m WHERE m.name = name) THEN
		RAISE EXCEPTION 'model "%" already exists', agent._shown(name)
			USING ERRCODE = 'duplicate_object';
	END IF;
	BEGIN
		INSERT INTO agent.models (name, provider, supports_code_execution)
		VALUES (name, provider, supports_code_execution)
		RETURNING models.id INTO v_id;
	EXCEPTION WHEN unique_violation THEN
		GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
		IF v_constraint IS DISTINCT FROM 'models_name_key' THEN
			RAISE;
		END IF;
		RAISE EXCEPTION 'model "%" already exists', agent._shown(name)
			USING ERRCODE = 'duplicate_object',
				  DETAIL = 'Another transaction created it at the same time.';
	END;
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_model(text, text, boolean) IS
	'add a model to the global catalog (the operator); returns its id';

CREATE FUNCTION agent.set_model_code_execution(model uuid, enabled boolean)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	m	agent.models;
BEGIN
	IF model IS NULL OR enabled IS NULL THEN
		RAISE EXCEPTION 'model and enabled must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO m FROM agent.models x WHERE x.id = model FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'model % does not exist', model USING ERRCODE = 'no_data_found';
	END IF;
	IF m.supports_code_execution = enabled THEN
		RETURN false;
	END IF;
	UPDATE agent.models x SET supports_code_execution = enabled WHERE x.id = m.id;
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_model_code_execution(uuid, boolean) IS
	'whether a model supports code execution (the operator); true when it changed';

REVOKE ALL ON FUNCTION agent._change_agent(uuid, text, boolean, boolean, text, uuid),
	agent._change_org_policy(text, boolean, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	agent.create_agent(text, text, uuid, text, text, boolean, boolean),
	agent.create_conversation(uuid, text, text, boolean),
	agent.set_agent_code_execution(uuid, boolean, text),
	agent.set_agent_file_upload(uuid, boolean, text),
	agent.set_conversation_code_execution(uuid, boolean, text),
	agent.set_agent_name(uuid, text, text),
	agent.set_agent_model(uuid, uuid, text),
	agent.set_conversation_title(uuid, text, text)
	TO agent_backend;
GRANT EXECUTE ON FUNCTION
	agent.set_personal_agents_code_execution(boolean, text),
	agent.set_require_distinct_approver(boolean, text),
	agent.create_workspace(text, text),
	agent.set_workspace_name(uuid, text, text)
	TO agent_admin;
