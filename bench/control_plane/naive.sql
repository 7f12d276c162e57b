-- Baseline for request_approve.sql: the same statements and transactions
-- (BEGIN, set the tenant, request, COMMIT; BEGIN, set the tenant, approve,
-- COMMIT) against a bare table, without IAM, cards, audit chain, triggers
-- or row-level security.  The ratio between the two is the control
-- plane's own cost.
\set org :client_id % :orgs
BEGIN;
SELECT set_config('sandbox.org_id', bench.id('org', :org)::text, true);
INSERT INTO bench.naive_requests (org_id, code, requested_by)
	VALUES (bench.id('org', :org), 'import math; print(math.pi)', 'bench-user') RETURNING id \gset
COMMIT;
BEGIN;
SELECT set_config('sandbox.org_id', bench.id('org', :org)::text, true);
UPDATE bench.naive_requests SET state = 'approved', approved_by = 'bench-approver' WHERE id = :id;
COMMIT;
