-- sandbox_ext upgrade 0.2.0 -> 0.3.0, hand-written tail: state that needs
-- the definitions replayed before it (see the head, 0.2.0--0.3.0.sql).

-- 44_maintenance.sql (issue 27, item 6): the maintenance jobs of 0.2.0
-- connect to cron.host, "localhost" by default, which a server listening
-- only on a Unix socket refuses: they are pointed at this server the way a
-- new install points them (schedule, command and user kept).
SELECT agent._point_maintenance_jobs();

-- Branch quota, 14_limits.sql and 70_retention.sql: the new settings (the
-- replayed agent.setting_rules() knows them now; the settings trigger
-- refused them before).
INSERT INTO agent.settings (key, value, description) VALUES
	('max_pending_requests_per_org', '100',
	 'requests one org may have waiting for an approval decision at once, unless agent.orgs.max_pending_requests says otherwise'),
	('retention_requests', '90 days',
	 'how long the code and description of a finished request (invocation and approval card) are kept (an interval, or forever)');
-- (the rows 0.2.0 wrote whose description changed)
UPDATE agent.settings SET description = 'bytes of files, skills, stored output, requests and audit events one org may keep, unless agent.orgs.max_stored_bytes says otherwise'
 WHERE key = 'max_stored_bytes_per_org';

-- Branch quota, 14_limits.sql / 21_audit_usage.sql / 50_sessions.sql:
-- what 0.3.0 counts against an org's storage and 0.2.0 did not: each
-- request's code, description and idempotency key (once: the card's
-- copies are gone), every audit event's details and actor, and each
-- skill's text (its name, description and paths: 0.2.0 counted its
-- content), with the same functions as the running code.  (This update
-- appends no audit event, so the trigger that counts the events from now
-- on, replayed above, has counted none of these.)
WITH b AS (
	SELECT x.org_id, sum(x.bytes)::bigint AS bytes
	  FROM (SELECT i.org_id, agent._request_bytes(i.code, i.description, i.idempotency_key) AS bytes
			  FROM agent.invocations i
			UNION ALL
			SELECT e.org_id, agent._audit_event_bytes(e.details, e.actor)
			  FROM agent.audit_events e
			UNION ALL
			SELECT s.org_id, agent._skill_bytes(s.id)
						   - coalesce((SELECT sum(octet_length(f.content)) FROM agent.skill_files f
									   WHERE f.skill_id = s.id), 0)
			  FROM agent.skills s) x
	 GROUP BY x.org_id)
INSERT INTO agent.org_usage AS u (org_id, stored_bytes)
	SELECT b.org_id, b.bytes FROM b JOIN agent.orgs o ON o.id = b.org_id
	ON CONFLICT (org_id) DO UPDATE SET stored_bytes = u.stored_bytes + excluded.stored_bytes,
									   updated_at = now();
