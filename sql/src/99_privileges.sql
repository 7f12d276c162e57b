-- Runs last, after every file above has created its objects: PUBLIC may
-- execute nothing in schema agent except the functions that row-level
-- security policies and CHECK constraints call as the current user, and
-- reads no table.  (CREATE FUNCTION grants EXECUTE to PUBLIC by default, so
-- a file added later cannot forget this.)  The explicit grants to
-- agent_backend and agent_auditor made by each file stay in place.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA agent FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.current_org(), agent.current_workspace(),
	agent.code_sha256(text) TO PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA agent FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA agent FROM PUBLIC;
GRANT SELECT ON ALL TABLES IN SCHEMA agent TO agent_auditor;
