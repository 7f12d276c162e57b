"""One code execution through sandbox_ext, as a backend service writes it
(psycopg 3, Debian's python3-psycopg).

A requester makes an agent and a thread, uploads a CSV and asks to run
Python on it; an approver learns of the card on the workspace's approvals
channel, reads it from the inbox (code, runtime, cost, balance) and approves
the exact code it saw; the requester streams the output from the
invocation's channel, then takes the result and the tool call in one call
and downloads the file the run wrote.

Notifications are hints: whoever learns a channel's name can NOTIFY on it,
so the client reads the state and the output through the API each time.

Environment: PGHOST/PGPORT/PGDATABASE/PGUSER (a login granted
agent_backend), SANDBOX_ORG and SANDBOX_WORKSPACE (the tenant),
SANDBOX_MODEL (a model that supports code execution).  Exits 0 when every
step did what it should; prints what it saw.
"""
import os
import select
import sys
import time

import psycopg
from psycopg import sql

ORG = os.environ["SANDBOX_ORG"]
WS = os.environ["SANDBOX_WORKSPACE"]
MODEL = os.environ["SANDBOX_MODEL"]

CODE = """\
import csv, time
rows = list(csv.DictReader(open("sales.csv")))
for r in rows:
    print("region", r["region"], r["amount"], flush=True)
    time.sleep(0.3)
total = sum(int(r["amount"]) for r in rows)
open("total.txt", "w").write(str(total))
print("total", total)
"""

failures = 0


def expect(what, ok, got=None):
    global failures
    print(("ok - " if ok else "not ok - ") + what + ("" if ok or got is None else f": got {got!r}"))
    if not ok:
        failures += 1


def tenant(conn):
    """Name the tenant at the start of a transaction (it lasts to its end)."""
    conn.execute("SELECT agent.set_tenant(%s, %s)", (ORG, WS))


class Listener:
    """An autocommit connection that LISTENs; notify handlers collect."""

    def __init__(self):
        self.conn = psycopg.connect(autocommit=True)
        self.got = []
        self.conn.add_notify_handler(lambda n: self.got.append((n.channel, n.payload)))

    def listen(self, channel):
        self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    def wait(self, timeout):
        """Notifications received within timeout seconds (at least one, or none)."""
        deadline = time.monotonic() + timeout
        while not self.got:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            readable, _, _ = select.select([self.conn.fileno()], [], [], left)
            if readable:
                self.conn.execute("SELECT 1")   # reads the socket; the handler collects
        got, self.got = self.got, []
        return got


def main():
    requester = psycopg.connect()       # not autocommit: each `with transaction()` is one
    approver = psycopg.connect()
    listener = Listener()

    with requester.transaction():
        tenant(requester)
        agent = requester.execute(
            "SELECT agent.create_agent(%s, 'specialist', %s, %s,"
            " code_execution_enabled => true, file_upload_enabled => true)",
            ("Python example", MODEL, "alice@example.com")).fetchone()[0]
        conv = requester.execute(
            "SELECT agent.create_conversation(%s, %s, 'Sales by region',"
            " code_execution_enabled => true)", (agent, "alice@example.com")).fetchone()[0]
        approvals = requester.execute("SELECT agent.approvals_channel()").fetchone()[0]
    listener.listen(approvals)

    with requester.transaction():
        tenant(requester)
        requester.execute(
            "SELECT agent.upload_file(%s, 'sales.csv', %s, %s, 'text/csv')",
            (conv, b"region,amount\nnorth,120\nsouth,80\neast,50\n", "alice@example.com"))
        inv, appr, status, reason = requester.execute(
            "SELECT invocation_id, approval_id, status, reason"
            "  FROM agent.request_execution(%s, %s, %s, 'python', %s, %s, %s)",
            (WS, agent, conv, CODE, "alice@example.com", "Total sales")).fetchone()
        output = requester.execute("SELECT agent.output_channel(%s)", (inv,)).fetchone()[0]
    expect("the request waits for approval", status == "pending_approval", (status, reason))
    listener.listen(output)       # before the approval: no notification is missed

    # The approver: the card's notification, the inbox, the decision.
    notes = listener.wait(30)
    expect("the approvals channel announced the card",
           (approvals, str(appr)) in notes, notes)
    with approver.transaction():
        tenant(approver)
        card = approver.execute(
            "SELECT title, runtime, credits_cost, org_balance, code, code_sha256"
            "  FROM agent.pending_approvals() WHERE approval_id = %s", (appr,)).fetchone()
        expect("the card is in the inbox", card is not None)
        title, runtime, cost, balance, code, sha = card
        print(f"card: {title}; {runtime}; costs {cost} of {balance} credits")
        expect("the card shows the code", code == CODE)
        expect("the card shows the interpreter's version", runtime.startswith("python3 3."), runtime)
        # Approve the hash of the code that was shown: nothing else can run.
        approver.execute("SELECT agent.approve(%s, %s, %s)", (appr, "bob@example.com", sha))

    # The requester streams the output: each notification is a reason to read.
    seq, chunks, state = 0, [], None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        listener.wait(5)
        with requester.transaction():
            tenant(requester)
            for s, stream, data, _ in requester.execute(
                    "SELECT * FROM agent.read_output(%s, %s)", (inv, seq)):
                seq = s
                chunks.append(data)
                for line in data.splitlines():
                    print(f"  | {line}" if stream == "stdout" else f"  | [stderr] {line}")
            state = requester.execute(
                "SELECT state FROM agent.invocations WHERE id = %s", (inv,)).fetchone()[0]
        if state not in ("pending_approval", "approved", "provisioning", "running"):
            break
    expect("the output streamed, in order", "".join(chunks).startswith("region north 120"), chunks[:1])

    # One call: the end, the output and the tool call.
    with requester.transaction():
        tenant(requester)
        r = requester.execute(
            "SELECT state, finished, exit_code, stdout, tool_call_id, output_preview, files"
            "  FROM agent.wait_result(%s, '60 s')", (inv,)).fetchone()
        state, finished, exit_code, stdout, tool_call, preview, files = r
        expect("the run succeeded", (state, finished, exit_code) == ("succeeded", True, 0), r[:3])
        expect("its output is the whole stdout", stdout.endswith("total 250\n"), stdout)
        expect("the tool call is there", tool_call is not None and preview == stdout)
        produced = [f for f in files if f["name"] == "total.txt"]
        expect("the tool call lists the file the run wrote", len(produced) == 1, files)
        content = requester.execute(
            "SELECT content FROM agent.download_file(%s)", (produced[0]["file_id"],)).fetchone()[0]
        expect("the file holds what the run wrote", bytes(content) == b"250", content)

    print(f"python example: {'done' if failures == 0 else str(failures) + ' failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
