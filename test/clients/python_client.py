"""clients/python against the real cluster, supervisor, jail and
interpreters, as a backend uses it: request, approve, stream, wait,
timeouts, cancel, files, errors and another tenant's view.  Prints
"ok - ..." / "not ok - ..." lines (test/suites/clients.sh counts them).

Run with the installed package (a venv: test/suites/clients.sh makes it).
Environment: PG* (a login granted agent_backend), SANDBOX_ORG,
SANDBOX_WORKSPACE, SANDBOX_MODEL (tenant A) and SANDBOX_ORG_B,
SANDBOX_WORKSPACE_B (tenant B).
"""
import hashlib
import os
import sys
import uuid
from typing import Any, Callable

import psycopg
from psycopg import sql
from sandbox_ext_client import Client, Refused, SandboxError

failures = 0


def expect(what: str, ok: bool, got: Any = None) -> None:
    global failures
    print(("ok - " if ok else "not ok - ") + what + ("" if ok or got is None else f": got {got!r}"))
    if not ok:
        failures += 1


def raises(what: str, sqlstate: str, fn: Callable[[], Any], message: str = "") -> None:
    """fn raises a SandboxError with that SQLSTATE (and message part)."""
    try:
        fn()
    except SandboxError as e:
        expect(what, e.sqlstate == sqlstate and message in e.message, (e.sqlstate, e.message))
        return
    expect(what, False, "no error")


def main() -> int:
    a = Client(os.environ["SANDBOX_ORG"], os.environ["SANDBOX_WORKSPACE"], poll=1.0)
    b = Client(os.environ["SANDBOX_ORG_B"], os.environ["SANDBOX_WORKSPACE_B"], poll=1.0)
    with a.transaction() as cur:
        row = cur.execute(
            "SELECT agent.create_agent('Py client', 'specialist', %s, 'alice@example.com',"
            " code_execution_enabled => true, file_upload_enabled => true)",
            (os.environ["SANDBOX_MODEL"],)).fetchone()
        assert row is not None
        agent = row[0]
        row = cur.execute("SELECT agent.create_conversation(%s, 'alice@example.com', 'py',"
                          " code_execution_enabled => true)", (agent,)).fetchone()
        assert row is not None
        conv = row[0]
        row = cur.execute("SELECT agent.create_conversation(%s, 'alice@example.com', 'off')", (agent,)).fetchone()
        assert row is not None
        conv_off = row[0]

    # ---- files in ----
    data = b"region,amount\nnorth,120\nsouth,80\n"
    fid = a.upload(conv, "sales.csv", data, "alice@example.com")
    files = a.files(conv)
    expect("upload: the file is listed with its size, sha256 and type",
           [(f.id, f.name, f.origin, f.size, f.sha256, f.content_type) for f in files]
           == [(fid, "sales.csv", "uploaded", len(data), hashlib.sha256(data).hexdigest(), "text/csv")], files)
    raises("upload: a name with .. is 22023", "22023",
           lambda: a.upload(conv, "../etc/passwd", b"x", "alice@example.com"))
    raises("upload: by a name the product keeps for itself is 42939", "42939",
           lambda: a.upload(conv, "x.txt", b"x", "system"))

    # ---- request, the approvers' stream, approve ----
    code = ("import csv, sys, time\n"
            "rows = list(csv.DictReader(open('sales.csv')))\n"
            "print('rows', len(rows), flush=True)\n"
            "time.sleep(1.5)\n"
            "print('to stderr', file=sys.stderr, flush=True)\n"
            "total = sum(int(r['amount']) for r in rows)\n"
            "open('total.txt', 'w').write(str(total))\n"
            "print('total', total)\n")
    run = a.request(agent, conv, "python", code, "alice@example.com", description="Total sales")
    expect("request: a run handle, pending approval",
           run.status == "pending_approval" and run.approval_id is not None and not run.replayed, run)
    key = f"k-{uuid.uuid4()}"
    again = a.request(agent, conv, "python", code, "alice@example.com", idempotency_key=key)
    replay = a.request(agent, conv, "python", code, "alice@example.com", idempotency_key=key)
    raises("request: the same key for other code is 23505", "23505",
           lambda: a.request(agent, conv, "python", "print(2)", "alice@example.com", idempotency_key=key))
    expect("request: an idempotency key returns the same run, marked replayed",
           replay.invocation_id == again.invocation_id and replay.replayed and not again.replayed, (again, replay))

    stream = a.cards(timeout=30)
    first = next(stream)
    expect("cards(): the pending cards come first, oldest first",
           first.approval_id == run.approval_id, first)
    expect("... a card holds the code, its hash, language and runtime",
           first.code == code and first.code_sha256 == hashlib.sha256(code.encode()).hexdigest()
           and first.language == "python" and (first.runtime or "").startswith("python3 3."), first)
    expect("... the cost, the balance and the network reach",
           first.credits_cost == 2 and isinstance(first.org_balance, int) and first.org_balance >= 2
           and first.egress_may_reach == "nothing (no network)", first)
    second = next(stream)
    expect("... then the next one, once", second.approval_id == again.approval_id, second)
    late = a.request(agent, conv, "shell", "echo late", "alice@example.com")
    third = next(stream)
    expect("... and a card requested while it waits arrives on the stream", third.approval_id == late.approval_id, third)
    stream.close()
    expect("pending(): the inbox lists all three",
           {c.approval_id for c in a.pending()} >= {run.approval_id, again.approval_id, late.approval_id})

    raises("approve: a hash other than the card's is 22023", "22023",
           lambda: a.approve(first.approval_id, "bob@example.com", "0" * 64))
    raises("approve: the requester may not approve her own request (42501)", "42501",
           lambda: a.approve(first, "alice@example.com"))
    raises("approve: an unknown approval is P0002", "P0002",
           lambda: a.approve(uuid.uuid4(), "bob@example.com"))
    expect("approve(card): binds the shown code's hash; returns the invocation",
           a.approve(first, "bob@example.com") == run.invocation_id)
    raises("approve: twice is 55000", "55000", lambda: a.approve(first, "bob@example.com"))

    # ---- stream: chunks, in order, live ----
    # Whoever learns the channel can NOTIFY on it: a forged 'done' after the
    # first chunk must not end the stream (the client reads the state).
    with a.transaction() as cur:
        row = cur.execute("SELECT agent.output_channel(%s)", (run.invocation_id,)).fetchone()
        assert row is not None
        channel = row[0]
    forger = psycopg.connect(autocommit=True)
    chunks = []
    live = None
    for ch in a.chunks(run, timeout=60):
        if not chunks:
            live = a.state(run)
            forger.execute(sql.SQL("NOTIFY {}, 'done'").format(sql.Identifier(channel)))
        chunks.append(ch)
    forger.close()
    expect("chunks(): the first chunk arrives while the run runs (streamed, not at the end)",
           live in ("provisioning", "running"), live)
    expect("chunks(): every chunk, each stream apart, each in its order",
           ("".join(c.data for c in chunks if c.stream == "stdout"),
            "".join(c.data for c in chunks if c.stream == "stderr")) == ("rows 2\ntotal 200\n", "to stderr\n"), chunks)
    expect("chunks(): sequence numbers increase, none twice",
           [c.seq for c in chunks] == sorted(set(c.seq for c in chunks)) and len(chunks) == 3, chunks)
    expect("chunks(): it ends with the run (final state), not at a forged 'done'", a.is_terminal(a.state(run))
           and any(c.data == "total 200\n" for c in chunks), chunks)

    # ---- wait: the result ----
    r = a.wait(run, 10)
    expect("wait(): succeeded, finished, exit code 0", (r.state, r.finished, r.exit_code, r.succeeded)
           == ("succeeded", True, 0, True), r)
    expect("wait(): the whole stdout and stderr", (r.stdout, r.stderr) == ("rows 2\ntotal 200\n", "to stderr\n"), r)
    expect("wait(): charged 2 credits, output kept whole", (r.credits_charged, r.output_truncated) == (2, False), r)
    expect("wait(): the tool call and its preview", r.tool_call_id is not None and "total 200" in (r.output_preview or ""), r)
    produced = [f for f in r.files if f.get("name") == "total.txt"]
    expect("wait(): the tool call lists the produced file", len(produced) == 1, r.files)
    dl = a.download(produced[0]["file_id"])
    expect("download(): the produced file's bytes and sha256",
           (dl.name, dl.content, dl.sha256, dl.size) == ("total.txt", b"200", hashlib.sha256(b"200").hexdigest(), 3), dl)
    expect("files(): the conversation lists both files",
           sorted((f.name, f.origin) for f in a.files(conv)) == [("sales.csv", "uploaded"), ("total.txt", "produced")])

    # ---- stream(): callbacks ----
    out: list[str] = []
    err: list[str] = []
    a.approve(second, "bob@example.com")
    res = a.stream(again, out.append, err.append, timeout=60)
    expect("stream(): stdout and stderr callbacks, then the result",
           ("".join(out), "".join(err), res.state) == ("rows 2\ntotal 200\n", "to stderr\n", "succeeded"), (out, err, res))

    # ---- failures and timeouts ----
    bad = a.request(agent, None, "shell", "echo oops >&2; exit 3", "alice@example.com")
    a.approve(bad.approval_id, "bob@example.com")
    rb = a.wait(bad, 60)
    expect("a failing run: state failed, exit code 3, its stderr", (rb.state, rb.exit_code, rb.stderr) == ("failed", 3, "oops\n"), rb)

    slow = a.request(agent, None, "shell", "echo start; sleep 30; echo never", "alice@example.com", wall_time_s=1)
    a.approve(slow.approval_id, "bob@example.com")
    rs = a.wait(slow, 60)
    expect("a run past its wall time: timed_out, finished, no exit code",
           (rs.state, rs.finished, rs.exit_code) == ("timed_out", True, None), rs)

    long = a.request(agent, None, "shell", "echo begun; sleep 30", "alice@example.com")
    a.approve(long.approval_id, "bob@example.com")
    rl = a.wait(long, 0.5)
    expect("wait(timeout): the timeout passes first: not finished, the state then",
           not rl.finished and rl.state in ("approved", "provisioning", "running") and rl.tool_call_id is None, rl)
    try:
        for _ in a.chunks(long, timeout=1.0):
            pass
        expect("chunks(timeout): raises TimeoutError while the run goes on", False, "no timeout")
    except TimeoutError:
        expect("chunks(timeout): raises TimeoutError while the run goes on", not a.is_terminal(a.state(long)))

    # ---- cancel ----
    expect("cancel(): a run in flight is cancelling", a.cancel(long, "alice@example.com", "enough") == "cancelling")
    rc = a.wait(long, 60)
    expect("... and ends cancelled, charged, with the reason",
           (rc.state, rc.credits_charged) == ("cancelled", 2) and "enough" in (rc.state_reason or ""), rc)
    raises("cancel(): a finished run is 55000", "55000", lambda: a.cancel(long, "alice@example.com"))
    expect("cancel(): a pending run is cancelled at once",
           a.cancel(late, "alice@example.com") == "cancelled" and a.wait(late, 0).state == "cancelled")
    expect("... and its card left the inbox", late.approval_id not in {c.approval_id for c in a.pending()})

    # ---- deny ----
    d = a.request(agent, None, "shell", "echo no", "alice@example.com")
    a.deny(d.approval_id, "bob@example.com", "not today")
    rd = a.wait(d, 0)
    card = a.card(d.approval_id)
    expect("deny(): the run is denied, final, uncharged", (rd.state, rd.finished, rd.credits_charged) == ("denied", True, 0), rd)
    expect("... the card records who and why", (card.status, card.decided_by, card.decision_reason)
           == ("denied", "bob@example.com", "not today"), card)

    # ---- refusals and errors ----
    try:
        a.request(agent, conv_off, "python", "print(1)", "alice@example.com")
        expect("a refused request raises Refused", False, "no error")
    except Refused as e:
        expect("a refused request raises Refused with its SQLSTATE and reason (thread toggle: 42501)",
               e.sqlstate == "42501" and e.reason != "", (e.sqlstate, e.reason))
    try:
        a.request(agent, conv, "cobol", "x", "alice@example.com")
        expect("request: an unknown language is Refused (22023, audited)", False, "no error")
    except Refused as e:
        expect("request: an unknown language is Refused (22023, audited)", e.sqlstate == "22023", (e.sqlstate, e.reason))
    raises("request: an unknown agent is an error, P0002", "P0002",
           lambda: a.request(uuid.uuid4(), None, "python", "x", "alice@example.com"))
    raises("is_terminal(): a misspelt state is 22023, not 'keep waiting'", "22023",
           lambda: a.is_terminal("succeded"), "unknown invocation state")
    try:
        a.is_terminal("nope")
    except SandboxError as e:
        expect("an error carries the product's detail", (e.detail or "").startswith("The states are"), e.detail)
    raises("wait(): an unknown invocation is P0002", "P0002", lambda: a.wait(uuid.uuid4(), 0))

    # ---- another tenant sees nothing of A's ----
    raises("tenant B: A's run is P0002 (state)", "P0002", lambda: b.state(run))
    raises("tenant B: A's output is P0002", "P0002", lambda: b.output(run))
    raises("tenant B: A's stream is P0002", "P0002", lambda: list(b.chunks(run, timeout=5)))
    raises("tenant B: A's result is P0002", "P0002", lambda: b.wait(run, 0))
    raises("tenant B: A's file is P0002", "P0002", lambda: b.download(fid))
    raises("tenant B: A's files are P0002", "P0002", lambda: b.files(conv))
    raises("tenant B: cancelling A's run is P0002", "P0002", lambda: b.cancel(slow, "mallory@example.com"))
    pend = a.request(agent, None, "shell", "echo a", "alice@example.com")
    raises("tenant B: approving A's card is P0002", "P0002", lambda: b.approve(pend.approval_id, "mallory@example.com"))
    expect("tenant B: its inbox holds none of A's cards", pend.approval_id not in {c.approval_id for c in b.pending()})
    expect("tenant A: still pending after B's attempt", a.card(pend.approval_id).status == "pending")
    a.cancel(pend, "alice@example.com")

    a.close()
    b.close()
    print(f"python client: {'done' if failures == 0 else str(failures) + ' failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:     # an unexpected error is a failure, with its trace
        import traceback
        traceback.print_exc()
        print(f"not ok - the Python client test ran to its end: {e!r}")
        sys.exit(1)
