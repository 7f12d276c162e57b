"""A tenant-scoped client of sandbox_ext's SQL API (psycopg 3).

It calls only the documented API (docs/reference.md, execution.md,
sessions.md), as agent_backend for one tenant: each call is one short
transaction that starts with agent.set_tenant(org, workspace), so the
database's row-level security decides what the client sees, never the
client.

Streaming follows execution.md, "Streaming": a notification is a hint and
nothing more (whoever learns a channel can NOTIFY on it), so on each one,
and every `poll` seconds without one, the client reads the state, then the
output after the last chunk it has, and stops when agent.is_terminal() says
the state is final.  Notifications arrive on a second connection of the
client's own (autocommit, LISTEN only), made when first needed.

A Client is not safe to share between threads; make one per thread.
"""
from __future__ import annotations

import contextlib
import select
import time
import uuid
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import psycopg
from psycopg import sql

from .errors import Refused, SandboxError
from .models import (CARD_COLUMNS, FILE_COLUMNS, Card, Chunk, Download,
                     FileInfo, Result, Run)

RunRef = Union[Run, uuid.UUID, str]
CardRef = Union[Card, uuid.UUID, str]
OutputCallback = Callable[[str], object]


def _invocation_id(run: RunRef) -> uuid.UUID:
    if isinstance(run, Run):
        return run.invocation_id
    return run if isinstance(run, uuid.UUID) else uuid.UUID(run)


def _approval_id(card: CardRef) -> uuid.UUID:
    if isinstance(card, Card):
        return card.approval_id
    return card if isinstance(card, uuid.UUID) else uuid.UUID(card)


class _Listener:
    """The client's LISTEN connection: collects the channels that were
    notified; wait() returns when one of a set was, or at a deadline."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.notified: set[str] = set()
        self.listening: dict[str, int] = {}
        conn.add_notify_handler(lambda n: self.notified.add(n.channel))

    def listen(self, channel: str) -> None:
        if self.listening.get(channel, 0) == 0:
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        self.listening[channel] = self.listening.get(channel, 0) + 1

    def unlisten(self, channel: str) -> None:
        self.listening[channel] -= 1
        if self.listening[channel] == 0:
            del self.listening[channel]
            self.notified.discard(channel)
            if not self.conn.closed:
                self.conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))

    def wait(self, channel: str, seconds: float) -> None:
        """Until `channel` is notified or `seconds` pass (a hint either way)."""
        deadline = time.monotonic() + seconds
        while channel not in self.notified:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            readable, _, _ = select.select([self.conn.fileno()], [], [], left)
            if readable:
                self.conn.execute("SELECT 1")   # reads the socket; the handler collects
        self.notified.discard(channel)


class Client:
    """The API for one tenant (org, workspace), as agent_backend.

    conninfo is a libpq connection string (empty: the PG* environment); the
    login must be a member of agent_backend.  Or pass a connection of your
    own (not in autocommit mode): the client then never closes it, and
    makes its LISTEN connection (when it streams) from `conninfo`, or else
    from that connection's parameters (libpq finds a password as usual:
    PGPASSWORD, ~/.pgpass).
    """

    def __init__(self, org: Union[uuid.UUID, str], workspace: Union[uuid.UUID, str],
                 conninfo: str = "", *, connection: Optional[psycopg.Connection[Any]] = None,
                 poll: float = 5.0) -> None:
        self.org = uuid.UUID(str(org))
        self.workspace = uuid.UUID(str(workspace))
        self.poll = poll
        self._conninfo = conninfo or (connection.info.dsn if connection is not None else "")
        self._own = connection is None
        try:
            self._conn: psycopg.Connection[Any] = (
                connection if connection is not None else psycopg.connect(conninfo))
        except psycopg.Error as e:
            raise SandboxError.from_psycopg(e) from e
        self._listener: Optional[_Listener] = None

    # ---- plumbing -------------------------------------------------------------
    def close(self) -> None:
        if self._listener is not None:
            self._listener.conn.close()
            self._listener = None
        if self._own:
            self._conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        """One transaction for the tenant, for calls of the API this client
        does not wrap (create_agent, ...): a cursor after set_tenant.  A
        database error becomes a SandboxError (the transaction is rolled
        back)."""
        try:
            with self._conn.transaction():
                cur = self._conn.cursor()
                cur.execute("SELECT agent.set_tenant(%s, %s)", (self.org, self.workspace))
                yield cur
        except psycopg.Error as e:
            raise SandboxError.from_psycopg(e) from e

    def _one(self, query: str, params: Sequence[Any]) -> Any:
        with self.transaction() as cur:
            row = cur.execute(query, params).fetchone()
        assert row is not None
        return row[0]

    def _listen(self) -> _Listener:
        if self._listener is None:
            try:
                self._listener = _Listener(psycopg.connect(self._conninfo, autocommit=True))
            except psycopg.Error as e:
                raise SandboxError.from_psycopg(e) from e
        return self._listener

    # ---- requests and approvals ------------------------------------------------
    def request(self, agent: Union[uuid.UUID, str], conversation: Union[uuid.UUID, str, None],
                language: str, code: str, requested_by: str, *,
                description: Optional[str] = None, idempotency_key: Optional[str] = None,
                wall_time_s: Optional[int] = None, memory_mb: Optional[int] = None,
                image: Optional[str] = None) -> Run:
        """agent.request_execution(): a run handle, pending approval.

        A refusal of policy raises Refused (its SQLSTATE and reason code),
        after the commit that keeps its audit event."""
        with self.transaction() as cur:
            row = cur.execute(
                "SELECT invocation_id, approval_id, status, reason, sqlstate, replayed"
                "  FROM agent.request_execution(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (self.workspace, agent, conversation, language, code, requested_by,
                 description, idempotency_key, wall_time_s, memory_mb, image)).fetchone()
        assert row is not None
        inv, appr, status, reason, sqlstate, replayed = row
        if status == "denied":
            raise Refused(sqlstate, reason)
        return Run(inv, appr, status, bool(replayed))

    def approve(self, card: CardRef, approver: str, code_sha256: Optional[str] = None) -> uuid.UUID:
        """agent.approve(); given a Card, binds the approval to the hash of
        the code that card showed.  Returns the invocation id."""
        if code_sha256 is None and isinstance(card, Card):
            code_sha256 = card.code_sha256
        inv: uuid.UUID = self._one("SELECT agent.approve(%s, %s, %s)",
                                   (_approval_id(card), approver, code_sha256))
        return inv

    def deny(self, card: CardRef, approver: str, reason: Optional[str] = None) -> uuid.UUID:
        """agent.deny(); returns the invocation id."""
        inv: uuid.UUID = self._one("SELECT agent.deny(%s, %s, %s)",
                                   (_approval_id(card), approver, reason))
        return inv

    def cancel(self, run: RunRef, actor: str, reason: Optional[str] = None) -> str:
        """agent.cancel(): 'cancelled' (it had not started) or 'cancelling'."""
        state: str = self._one("SELECT agent.cancel(%s, %s, %s)", (_invocation_id(run), actor, reason))
        return state

    def pending(self) -> list[Card]:
        """The workspace's pending cards, oldest first (the inbox)."""
        with self.transaction() as cur:
            rows = cur.execute(
                sql.SQL("SELECT {} FROM agent.pending_approvals()").format(
                    sql.SQL(", ").join(map(sql.Identifier, CARD_COLUMNS)))).fetchall()
        return [Card(*r) for r in rows]

    def card(self, card: CardRef) -> Card:
        """One card, whatever its status (agent.approval_card)."""
        with self.transaction() as cur:
            row = cur.execute(
                sql.SQL("SELECT {} FROM agent.approval_card(%s)").format(
                    sql.SQL(", ").join(map(sql.Identifier, CARD_COLUMNS))),
                (_approval_id(card),)).fetchone()
        assert row is not None
        return Card(*row)

    def cards(self, timeout: Optional[float] = None) -> Iterator[Card]:
        """Pending cards as a stream, for approvers: those waiting now, then
        each new one as it arrives, each once.  Ends after `timeout` seconds
        (None: never; break out of the loop to stop)."""
        channel: str = self._one("SELECT agent.approvals_channel()", ())
        listener = self._listen()
        listener.listen(channel)          # before the first read: nothing is missed
        seen: set[uuid.UUID] = set()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                for c in self.pending():
                    if c.approval_id not in seen:
                        seen.add(c.approval_id)
                        yield c
                left = self.poll if deadline is None else min(self.poll, deadline - time.monotonic())
                if left <= 0:
                    return
                listener.wait(channel, left)
        finally:
            listener.unlisten(channel)

    # ---- runs: state, output, wait ---------------------------------------------
    def state(self, run: RunRef) -> str:
        """The invocation's state now."""
        state: str = self._one("SELECT agent.wait(%s, '0 s')", (_invocation_id(run),))
        return state

    def is_terminal(self, state: str) -> bool:
        """Whether a state is final (agent.is_terminal; an unknown state is 22023)."""
        final: bool = self._one("SELECT agent.is_terminal(%s)", (state,))
        return final

    def output(self, run: RunRef, after_seq: int = 0) -> list[Chunk]:
        """The output stored so far after a sequence number, in order."""
        with self.transaction() as cur:
            rows = cur.execute("SELECT seq, stream, data FROM agent.read_output(%s, %s)",
                               (_invocation_id(run), after_seq)).fetchall()
        return [Chunk(*r) for r in rows]

    def chunks(self, run: RunRef, timeout: Optional[float] = None, after_seq: int = 0) -> Iterator[Chunk]:
        """The run's output as it is stored, until the run's state is final.

        Raises TimeoutError when `timeout` seconds pass first (the run goes on)."""
        inv = _invocation_id(run)
        channel: str = self._one("SELECT agent.output_channel(%s)", (inv,))
        listener = self._listen()
        listener.listen(channel)          # before the first read: nothing is missed
        deadline = None if timeout is None else time.monotonic() + timeout
        seq = after_seq
        try:
            while True:
                # The state first, then the output: the finish commits after
                # the last output row, so a final state means all of it is there.
                with self.transaction() as cur:
                    row = cur.execute("SELECT agent.is_terminal(s) FROM agent.wait(%s, '0 s') s",
                                      (inv,)).fetchone()
                    assert row is not None
                    final = bool(row[0])
                    rows = cur.execute("SELECT seq, stream, data FROM agent.read_output(%s, %s)",
                                       (inv, seq)).fetchall()
                for r in rows:
                    seq = r[0]
                    yield Chunk(*r)
                if final:
                    return
                left = self.poll if deadline is None else min(self.poll, deadline - time.monotonic())
                if left <= 0:
                    raise TimeoutError(f"invocation {inv} is not finished after {timeout} s")
                listener.wait(channel, left)
        finally:
            listener.unlisten(channel)

    def stream(self, run: RunRef, on_stdout: Optional[OutputCallback] = None,
               on_stderr: Optional[OutputCallback] = None, timeout: Optional[float] = None) -> Result:
        """Call on_stdout / on_stderr with each piece of output as it is
        stored, until the run ends; then its Result.  TimeoutError when
        `timeout` seconds pass first."""
        for c in self.chunks(run, timeout):
            cb = on_stdout if c.stream == "stdout" else on_stderr
            if cb is not None:
                cb(c.data)
        return self.wait(run, 0)

    def wait(self, run: RunRef, timeout: float = 30.0) -> Result:
        """agent.wait_result(): wait up to `timeout` seconds for the end,
        then the state, the whole output and the tool call in one call.
        result.finished is false when the timeout passed first."""
        with self.transaction() as cur:
            row = cur.execute(
                "SELECT invocation_id, state, finished, state_reason, exit_code, stdout, stderr,"
                "       output_truncated, credits_charged, tool_call_id, output_preview, files"
                "  FROM agent.wait_result(%s, make_interval(secs => %s))",
                (_invocation_id(run), float(timeout))).fetchone()
        assert row is not None
        (inv, state, finished, reason, exit_code, stdout, stderr, truncated, charged,
         tool_call, preview, files) = row
        return Result(inv, state, bool(finished), reason, exit_code, stdout or "", stderr or "",
                      bool(truncated), charged or 0, tool_call, preview, list(files or []))

    # ---- files -------------------------------------------------------------------
    def upload(self, conversation: Union[uuid.UUID, str], name: str, content: bytes,
               uploaded_by: str, content_type: Optional[str] = None) -> uuid.UUID:
        """agent.upload_file(): the new file's id (in /workspace/<name> at the next run)."""
        fid: uuid.UUID = self._one("SELECT agent.upload_file(%s, %s, %s, %s, %s)",
                                   (conversation, name, content, uploaded_by, content_type))
        return fid

    def files(self, conversation: Union[uuid.UUID, str]) -> list[FileInfo]:
        """agent.list_files(): every file row of the conversation."""
        with self.transaction() as cur:
            rows = cur.execute(
                sql.SQL("SELECT {} FROM agent.list_files(%s)").format(
                    sql.SQL(", ").join(map(sql.Identifier, FILE_COLUMNS))),
                (conversation,)).fetchall()
        return [FileInfo(*r) for r in rows]

    def download(self, file: Union[FileInfo, uuid.UUID, str]) -> Download:
        """agent.download_file(): name, type, size, sha256 and the bytes."""
        fid = file.id if isinstance(file, FileInfo) else file
        with self.transaction() as cur:
            row = cur.execute("SELECT name, content_type, size, sha256, content"
                              "  FROM agent.download_file(%s)", (fid,)).fetchone()
        assert row is not None
        name, ctype, size, sha, content = row
        return Download(name, ctype, size, sha, bytes(content))

    def delete_file(self, conversation: Union[uuid.UUID, str], name: str, deleted_by: str) -> int:
        """agent.delete_file(): the bytes freed."""
        freed: int = self._one("SELECT agent.delete_file(%s, %s, %s)", (conversation, name, deleted_by))
        return freed
