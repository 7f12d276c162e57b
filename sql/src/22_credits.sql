-- Credits: an append-only ledger and the balance it implies.
--
-- The balance is maintained by a trigger on the ledger, in the same
-- statement as the ledger row, so balance = sum(ledger) holds after every
-- statement; the CHECK (balance >= 0) makes an overdraft fail as a whole
-- (ledger row included).  Charge and refund lock the invocation row first
-- and the balance row second, always in that order, so concurrent charges
-- of one org queue on the balance and concurrent charges of one invocation
-- queue on the invocation; neither deadlocks.

CREATE TABLE agent.credit_balances (
	org_id		uuid PRIMARY KEY REFERENCES agent.orgs (id),
	balance		bigint NOT NULL DEFAULT 0 CHECK (balance >= 0),
	updated_at	timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent.credit_ledger (
	id				bigserial PRIMARY KEY,
	org_id			uuid NOT NULL REFERENCES agent.orgs (id),
	workspace_id	uuid,
	invocation_id	uuid REFERENCES agent.invocations (id),
	kind			text NOT NULL CHECK (kind IN ('grant', 'charge', 'refund', 'adjust')),
	amount			bigint NOT NULL,
	reason			text,
	created_at		timestamptz NOT NULL DEFAULT now(),
	CHECK (CASE kind
		WHEN 'grant' THEN amount > 0
		WHEN 'charge' THEN amount <= 0 AND invocation_id IS NOT NULL
		WHEN 'refund' THEN amount >= 0 AND invocation_id IS NOT NULL
		ELSE amount <> 0 END)
);
COMMENT ON TABLE agent.credit_ledger IS 'append-only; the balance is its sum per org';
CREATE INDEX credit_ledger_org_idx ON agent.credit_ledger (org_id, id);
-- At most one charge and one refund per invocation.
CREATE UNIQUE INDEX credit_ledger_once_per_invocation
	ON agent.credit_ledger (invocation_id, kind)
	WHERE kind IN ('charge', 'refund');

-- Fold each ledger row into the balance.
CREATE FUNCTION agent._credit_ledger_apply() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	-- Update first: an INSERT ... ON CONFLICT would check the CHECK against
	-- the proposed row (a negative amount) before finding the conflict.
	UPDATE agent.credit_balances b
	   SET balance = b.balance + NEW.amount, updated_at = now()
	 WHERE b.org_id = NEW.org_id;
	IF NOT FOUND THEN
		INSERT INTO agent.credit_balances AS b (org_id, balance, updated_at)
			VALUES (NEW.org_id, NEW.amount, now())
			ON CONFLICT (org_id) DO UPDATE
				SET balance = b.balance + excluded.balance, updated_at = excluded.updated_at;
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER credit_ledger_apply
	AFTER INSERT ON agent.credit_ledger
	FOR EACH ROW EXECUTE FUNCTION agent._credit_ledger_apply();

CREATE TRIGGER credit_ledger_append_only
	BEFORE UPDATE OR DELETE ON agent.credit_ledger
	FOR EACH ROW EXECUTE FUNCTION agent._refuse_change();
CREATE TRIGGER credit_ledger_no_truncate
	BEFORE TRUNCATE ON agent.credit_ledger
	FOR EACH STATEMENT EXECUTE FUNCTION agent._refuse_change();
-- ALWAYS, like the audit trail's (20_audit.sql): replica mode does not
-- open the ledger either.  A logical-replication subscriber only ever
-- inserts into it, which these allow.
ALTER TABLE agent.credit_ledger ENABLE ALWAYS TRIGGER credit_ledger_append_only;
ALTER TABLE agent.credit_ledger ENABLE ALWAYS TRIGGER credit_ledger_no_truncate;

-- A balance moves only through the ledger: the only legitimate writer is
-- the trigger above, which runs one trigger level down.
CREATE FUNCTION agent._credit_balances_guard() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	IF pg_trigger_depth() < 2 THEN
		RAISE EXCEPTION 'cannot change a credit balance directly'
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'Balances follow agent.credit_ledger; use agent.grant_credits().';
	END IF;
	RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE TRIGGER credit_balances_guard
	BEFORE INSERT OR UPDATE OR DELETE ON agent.credit_balances
	FOR EACH ROW EXECUTE FUNCTION agent._credit_balances_guard();
CREATE TRIGGER credit_balances_no_truncate
	BEFORE TRUNCATE ON agent.credit_balances
	FOR EACH STATEMENT EXECUTE FUNCTION agent._refuse_change();
-- The two balance triggers above (credit_ledger_apply and
-- credit_balances_guard) stay ordinary (origin-only): a replica applying
-- replicated rows receives the balances themselves and must neither apply
-- the ledger a second time nor be refused the replicated balance.  A
-- balance rewritten there shows in agent.credit_overview (consistent =
-- false); the ledger itself stays append-only.
ALTER TABLE agent.credit_balances ENABLE ALWAYS TRIGGER credit_balances_no_truncate;

-- Add credits to an org; returns the new balance.
CREATE FUNCTION agent.grant_credits(org uuid, amount bigint, reason text)
	RETURNS bigint
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_balance bigint;
BEGIN
	IF org IS NULL OR amount IS NULL THEN
		RAISE EXCEPTION 'org and amount must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(reason, 'reason', 'reason');
	IF amount <= 0 THEN
		RAISE EXCEPTION 'credit grant must be positive'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('The amount was %s.', amount);
	END IF;
	PERFORM 1 FROM agent.orgs o WHERE o.id = org;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'org % does not exist', org USING ERRCODE = 'no_data_found';
	END IF;
	INSERT INTO agent.credit_ledger (org_id, kind, amount, reason)
		VALUES (org, 'grant', amount, reason);
	SELECT b.balance INTO v_balance FROM agent.credit_balances b WHERE b.org_id = org;
	PERFORM agent._audit(org, NULL, 'credits.granted', NULL, current_user::text,
						 jsonb_build_object('amount', amount, 'reason', reason,
											'balance', v_balance));
	RETURN v_balance;
END
$$;

-- The charge itself, for an invocation that exists (the claim calls it for
-- the row it holds locked; agent.charge_invocation checks its argument):
-- the ledger's row.  Returns the price charged (now, or before), or NULL,
-- changing nothing, when the balance does not cover it.  The caller sets
-- the invocation's credits_charged (the claim in the same UPDATE that
-- makes it provisioning: one row version fewer per run).
CREATE FUNCTION agent._charge(invocation uuid) RETURNS integer
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_inv	agent.invocations;
	v_price integer;
	v_balance bigint;
BEGIN
	-- Concurrent charges of this invocation wait here, then see the charge.
	SELECT * INTO v_inv FROM agent.invocations i WHERE i.id = invocation FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RETURN NULL;		-- (the caller holds the row: it exists)
	END IF;
	SELECT (-l.amount)::integer INTO v_price FROM agent.credit_ledger l
	 WHERE l.invocation_id = invocation AND l.kind = 'charge';
	IF FOUND THEN
		PERFORM 1 FROM agent.credit_ledger l
		 WHERE l.invocation_id = invocation AND l.kind = 'refund';
		IF FOUND THEN
			RAISE EXCEPTION 'invocation % was refunded and cannot be charged again', invocation
				USING ERRCODE = 'object_not_in_prerequisite_state',
					  DETAIL = 'An invocation is charged at most once.';
		END IF;
		RETURN v_price;
	END IF;

	-- Concurrent charges of this org wait here, then see the new balance.
	-- The plan's price comes with it (read as of the statement's start,
	-- as when it was a statement of its own before this one); an org
	-- without a balance row reads it alone.
	SELECT b.balance, (SELECT p.credits_per_invocation
						 FROM agent.orgs o JOIN agent.plans p ON p.plan = o.plan
						WHERE o.id = v_inv.org_id)
	  INTO v_balance, v_price
	  FROM agent.credit_balances b
	 WHERE b.org_id = v_inv.org_id FOR UPDATE OF b;
	IF NOT FOUND THEN
		SELECT p.credits_per_invocation INTO v_price
		  FROM agent.orgs o JOIN agent.plans p ON p.plan = o.plan
		 WHERE o.id = v_inv.org_id;
	END IF;
	IF coalesce(v_balance, 0) < v_price THEN
		RETURN NULL;
	END IF;

	INSERT INTO agent.credit_ledger (org_id, workspace_id, invocation_id, kind, amount, reason)
		VALUES (v_inv.org_id, v_inv.workspace_id, invocation, 'charge', -v_price,
				'code execution');
	RETURN v_price;
END
$$;

-- Charge the plan's price for an invocation, in the caller's transaction.
-- Returns false, changing nothing, when the balance does not cover it;
-- true when charged now or already charged before.  An invocation whose
-- charge was refunded cannot be charged again (at most one charge each).
CREATE FUNCTION agent.charge_invocation(invocation uuid) RETURNS boolean
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_price integer;
BEGIN
	IF invocation IS NULL THEN
		RAISE EXCEPTION 'invocation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.invocations i WHERE i.id = invocation) THEN
		RAISE EXCEPTION 'invocation % does not exist', invocation
			USING ERRCODE = 'no_data_found';
	END IF;
	v_price := agent._charge(invocation);
	IF v_price IS NULL THEN
		RETURN false;
	END IF;
	UPDATE agent.invocations i SET credits_charged = v_price
	 WHERE i.id = invocation AND i.credits_charged <> v_price;
	RETURN true;
END
$$;

-- Give back exactly what an invocation was charged (provisioning failed).
-- Returns false when nothing was charged; true when refunded now or before.
-- The operator's entry: the reason is free text from outside, limited like
-- every other (22001); the supervisor's own reasons (which may quote a
-- runner's error) take agent._refund directly.
CREATE FUNCTION agent.refund_invocation(invocation uuid, reason text) RETURNS boolean
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF invocation IS NULL THEN
		RAISE EXCEPTION 'invocation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(reason, 'reason', 'reason');
	RETURN agent._refund(invocation, reason);
END
$$;

-- The refund itself (refund_invocation's contract, for an invocation id
-- that is not null; the reason unchecked).
CREATE FUNCTION agent._refund(invocation uuid, reason text) RETURNS boolean
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_inv	agent.invocations;
	v_charged bigint;
BEGIN
	SELECT * INTO v_inv FROM agent.invocations i WHERE i.id = invocation FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'invocation % does not exist', invocation
			USING ERRCODE = 'no_data_found';
	END IF;
	SELECT -l.amount INTO v_charged FROM agent.credit_ledger l
	 WHERE l.invocation_id = invocation AND l.kind = 'charge';
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM 1 FROM agent.credit_ledger l
	 WHERE l.invocation_id = invocation AND l.kind = 'refund';
	IF FOUND THEN
		RETURN true;
	END IF;
	-- Same lock order as charge_invocation: invocation, then balance.
	PERFORM 1 FROM agent.credit_balances b WHERE b.org_id = v_inv.org_id FOR UPDATE;
	INSERT INTO agent.credit_ledger (org_id, workspace_id, invocation_id, kind, amount, reason)
		VALUES (v_inv.org_id, v_inv.workspace_id, invocation, 'refund', v_charged,
				coalesce(reason, 'refund'));
	UPDATE agent.invocations i SET credits_charged = 0 WHERE i.id = invocation;
	RETURN true;
END
$$;
