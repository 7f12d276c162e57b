-- One request + approve pair, as the product does it: the backend requests
-- in one transaction, an approver approves in another.  Each client acts
-- for its own org.
\set org :client_id % :orgs
BEGIN;
SELECT agent.set_tenant(bench.id('org', :org), bench.id('ws', :org));
SELECT approval_id FROM agent.request_execution(bench.id('ws', :org), bench.id('agent', :org),
	NULL, 'python', 'import math; print(math.pi)', 'bench-user') \gset
COMMIT;
BEGIN;
SELECT agent.set_tenant(bench.id('org', :org), bench.id('ws', :org));
SELECT agent.approve(:approval_id, 'bench-approver');
COMMIT;
