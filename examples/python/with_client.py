"""The flow of run_once.py through the Python client (clients/python,
docs/clients.md): what is left when the plumbing (the LISTEN connection,
set_tenant in each transaction, reading on each hint) is the library's.

Environment as run_once.py's: PGHOST/PGPORT/PGDATABASE/PGUSER (a login
granted agent_backend), SANDBOX_ORG, SANDBOX_WORKSPACE, SANDBOX_MODEL.
Exits 0 when every step did what it should.
"""
import os
import sys

try:
    from sandbox_ext_client import Client
except ImportError:     # run from the repository, not installed (pip install ./clients/python)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../clients/python"))
    from sandbox_ext_client import Client

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


def main() -> int:
    failures = 0

    def expect(what: str, ok: bool) -> None:
        nonlocal failures
        print(("ok - " if ok else "not ok - ") + what)
        failures += not ok

    with Client(os.environ["SANDBOX_ORG"], os.environ["SANDBOX_WORKSPACE"]) as c:
        with c.transaction() as cur:        # setup calls the client does not wrap
            agent = cur.execute(
                "SELECT agent.create_agent('Client example', 'specialist', %s, 'alice@example.com',"
                " code_execution_enabled => true, file_upload_enabled => true)",
                (os.environ["SANDBOX_MODEL"],)).fetchone()[0]
            conv = cur.execute("SELECT agent.create_conversation(%s, 'alice@example.com', 'Sales',"
                               " code_execution_enabled => true)", (agent,)).fetchone()[0]

        c.upload(conv, "sales.csv", b"region,amount\nnorth,120\nsouth,80\neast,50\n", "alice@example.com")
        run = c.request(agent, conv, "python", CODE, "alice@example.com", description="Total sales")

        # The approver: the card as it arrives, approved for the code it shows.
        for card in c.cards(timeout=30):
            if card.approval_id == run.approval_id:
                print(f"card: {card.title}; {card.runtime}; costs {card.credits_cost} of {card.org_balance} credits")
                c.approve(card, "bob@example.com")
                break

        result = c.stream(run, on_stdout=lambda s: print("  |", s, end=""),
                          on_stderr=lambda s: print("  | [stderr]", s, end=""), timeout=120)
        expect("the run succeeded", result.succeeded and result.exit_code == 0)
        expect("its output ends with the total", result.stdout.endswith("total 250\n"))
        total = next(f for f in result.files if f["name"] == "total.txt")
        expect("the file it wrote holds the total", c.download(total["file_id"]).content == b"250")

    print(f"python client example: {'done' if failures == 0 else str(failures) + ' failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
