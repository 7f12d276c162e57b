#!/usr/bin/env bash
# The main job end to end on a throwaway cluster (run by `make demo` after
# the build and install):
#
#   an org on the Pro plan with credits, a workspace, an agent and a thread;
#   a Python request that uses pandas on a small CSV; its approval card;
#   the approval; the output streamed live as the code produces it; then the
#   tool call, the charge, the balance and the audit trail.
#
# KEEP_CLUSTER=1 leaves the cluster running afterwards (scripts/cluster.sh
# env prints how to connect).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
export SANDBOX_CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_demo}
export SANDBOX_PGPORT=${SANDBOX_PGPORT:-55433}
export SANDBOX_DB=${SANDBOX_DB:-sandbox_demo}
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}

as_pg() {
	if [ "$(id -un)" = postgres ]; then "$@"
	elif [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"
	else sudo -u postgres -- "$@"; fi
}
psql_q() {
	as_pg "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" \
		-U postgres -d "$SANDBOX_DB" "$@"
}
val() { psql_q -At -c "$1"; }
# As the backend would: as agent_backend, in the tenant's context
# (session-level SET here; a pooled backend uses agent.set_tenant() per
# transaction).
tq() { psql_q -c "SET ROLE agent_backend" -c "SET sandbox.org_id = '$ORG'" -c "SET sandbox.workspace_id = '$WS'" "$@"; }

bold=$(tput bold 2>/dev/null || true)
dim=$(tput dim 2>/dev/null || true)
off=$(tput sgr0 2>/dev/null || true)
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }

listen_bin=$(mktemp /tmp/sandbox_listen.XXXXXX)
follow_out=$(mktemp /tmp/sandbox_follow_out.XXXXXX)
follow_err=$(mktemp /tmp/sandbox_follow_err.XXXXXX)
cleanup() {
	rm -f "$listen_bin" "$follow_out" "$follow_err"
	if [ "${KEEP_CLUSTER:-0}" != 1 ]; then
		"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT
cc -O2 -Wall -o "$listen_bin" "$top/test/tools/listen.c" -I"$("$PGBIN/pg_config" --includedir)" -I/usr/include/postgresql -lpq
chmod 0755 "$listen_bin"

step "Starting a throwaway PostgreSQL 15 cluster ($SANDBOX_CLUSTER_DIR, port $SANDBOX_PGPORT)"
"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
"$top/scripts/cluster.sh" start
for _ in $(seq 1 50); do
	[ "$(val "SELECT running FROM agent.worker_status()")" = t ] && break
	sleep 0.2
done
echo "supervisor: $(val "SELECT CASE WHEN running THEN 'running, pid ' || pid ELSE 'not running' END FROM agent.worker_status()")"

step "An org on the Pro plan with 10 credits, a workspace, a model, an agent, a thread"
# Through the setup API: the org, its credits and the model are the
# platform operator's (the owner's), the workspace the org admin's
# (agent_admin), the agent and the thread the backend's (agent_backend),
# each in the tenant it acts for.
ORG=$(val "SELECT agent.create_org('Acme Analytics', 'pro')")
val "SELECT agent.grant_credits('$ORG', 10, 'demo top-up')" >/dev/null
MODEL=$(val "SELECT agent.create_model('demo-model-' || left(gen_random_uuid()::text, 8), 'demo', supports_code_execution => true)")
WS=$(psql_q -At -c "SET ROLE agent_admin" \
	-c "SELECT agent.create_workspace('Sales', 'root@acme.test') FROM agent.tenant('$ORG')")
AGENT=$(tq -At -c "SELECT agent.create_agent('Data analyst', 'specialist', '$MODEL', 'alice@acme.test',
								 code_execution_enabled => true, file_upload_enabled => true)")
CONV=$(tq -At -c "SELECT agent.create_conversation('$AGENT', 'alice@acme.test', 'Q3 sales by region',
										code_execution_enabled => true)")
echo "org $ORG"
echo "workspace $WS, agent $AGENT, thread $CONV"
echo "balance: $(val "SELECT balance FROM agent.credit_balances WHERE org_id = '$ORG'") credits"
# What scripts/cluster.sh env prints next to the connection (KEEP_CLUSTER=1).
printf 'export SANDBOX_ORG=%s SANDBOX_WORKSPACE=%s SANDBOX_AGENT=%s SANDBOX_CONVERSATION=%s SANDBOX_MODEL=%s\n' \
	"$ORG" "$WS" "$AGENT" "$CONV" "$MODEL" | as_pg tee "$SANDBOX_CLUSTER_DIR/demo.env" >/dev/null

step "The agent asks to run Python (pandas on a small CSV)"
code=$(cat <<'PY'
import io, time
import pandas as pd

csv = io.StringIO("""region,rep,amount
north,ana,120
south,bo,80
north,cy,200
east,di,50
south,ed,95
east,fa,130
""")
df = pd.read_csv(csv)
print(f"loaded {len(df)} rows", flush=True)
for region, total in df.groupby("region")["amount"].sum().sort_values(ascending=False).items():
    time.sleep(0.7)          # pretend each region takes a while
    print(f"{region:>6}: {total:5d}", flush=True)
print("top rep:", df.loc[df["amount"].idxmax(), "rep"], flush=True)
PY
)
read -r INV APPROVAL STATUS < <(tq -At -F ' ' -v code="$code" -f - <<SQL
SELECT invocation_id, approval_id, status
  FROM agent.request_execution('$WS', '$AGENT', '$CONV', 'python', :'code',
							   'alice@acme.test', 'Total sales per region');
SQL
)
echo "request_execution → status $STATUS, invocation $INV"

step "The approval card"
tq -x -c "SELECT * FROM agent.approval_card('$APPROVAL')"

step "Approved by bob@acme.test; output as the code produces it"
# scripts/follow.sh is the client: it LISTENs on the channel only the
# tenant can learn, takes each notification as a hint, and reads the state
# and the output under the tenant until the state is final.
"$top/scripts/follow.sh" "$listen_bin" "$ORG" "$WS" "$INV" 120 2>"$follow_err" >"$follow_out" &
follower=$!
for _ in $(seq 1 100); do
	grep -q '^ready$' "$follow_err" 2>/dev/null && break
	sleep 0.1
done
t0=$(date +%s.%N)
tq -At -c "SELECT agent.approve('$APPROVAL', 'bob@acme.test')" >/dev/null
state=
while IFS=$'\t' read -r kind line; do
	case $kind in
		stdout) printf '  │ %s\n' "$line" ;;
		stderr) printf '  │ [stderr] %s\n' "$line" ;;
		state) state=$line ;;
	esac
done < <(tail -n +1 -f --pid="$follower" "$follow_out")
wait "$follower" || true
printf '%sfinished: %s in %s s after approval%s\n' "$dim" "${state:-unknown}" \
	"$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')" "$off"

step "The invocation"
psql_q <<SQL
SELECT state, state_reason, exit_code, credits_charged AS credits,
	   round(extract(epoch FROM finished_at - started_at) * 1000) AS run_ms,
	   peak_memory_bytes / 1048576 AS peak_mib
  FROM agent.invocations WHERE id = '$INV';
SQL

step "The tool call returned to the agent"
psql_q -x <<SQL
SELECT tool_name, status, exit_code, input_hash, output_preview
  FROM agent.agent_tool_calls WHERE invocation_id = '$INV';
SQL

step "Credits: the ledger and the balance"
psql_q <<SQL
SELECT kind, amount, reason, created_at::time(0) AS at
  FROM agent.credit_ledger WHERE org_id = '$ORG' ORDER BY id;
SELECT balance AS balance_now FROM agent.credit_balances WHERE org_id = '$ORG';
SQL

step "The audit trail (hash-chained per org)"
psql_q <<SQL
SELECT id, event_type, actor, left(details::text, 60) AS details
  FROM agent.audit_events WHERE org_id = '$ORG' ORDER BY id;
SELECT * FROM agent.verify_audit_chain('$ORG');
SQL

if [ -x "$top/scripts/export-demo.sh" ]; then
	step "Analytics: the row in ClickHouse"
	"$top/scripts/export-demo.sh" "$INV" || true
fi
echo
echo "Demo done. KEEP_CLUSTER=1 make demo keeps the cluster; then scripts/cluster.sh env prints how to reach"
echo "its database and the ids it made (eval \"\$(scripts/cluster.sh env)\"; psql)."
