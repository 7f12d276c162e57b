-- Core C entry points shared by the rest of the extension.

-- Wake the supervisor when the calling transaction commits (no-op, returning
-- false, when the library was not preloaded and no supervisor exists).
CREATE FUNCTION agent._wake_supervisor() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_wake_supervisor'
	LANGUAGE C VOLATILE STRICT;

-- The same, naming the invocation that became claimable: a runner tries
-- it first (agent.runner_claim's notified; a hint only).
CREATE FUNCTION agent._wake_runners(invocation uuid) RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_wake_runners'
	LANGUAGE C VOLATILE STRICT;

-- The same, for a cancel request: the supervisor then looks for cancelled
-- runs (it does not on other wake-ups).
CREATE FUNCTION agent._wake_supervisor_cancel() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_wake_supervisor_cancel'
	LANGUAGE C VOLATILE STRICT;

-- True when sandbox_ext is in shared_preload_libraries, so approved
-- invocations will actually be run by the supervisor.
CREATE FUNCTION agent.supervisor_available() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_is_preloaded'
	LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION agent.supervisor_available() IS
	'true when sandbox_ext is preloaded and a supervisor can run approved invocations';
