-- The supervisor's charge at provisioning: one approved invocation each.
SELECT agent.charge_invocation(invocation_id)
  FROM bench.charge_queue WHERE n = (SELECT nextval('bench.charge_seq'));
