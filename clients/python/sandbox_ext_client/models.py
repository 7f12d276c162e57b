"""What the client returns: plain, frozen records, one meaning per field.

Their fields are the SQL API's columns under the same names
(docs/reference.md), so the reference describes them.
"""
from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Run:
    """A run handle: what request() returns.

    status is the request's at the time (pending_approval; on a replay of
    an idempotency key, the invocation's state then); replayed says whether
    an earlier request with the same key was returned.
    """
    invocation_id: uuid.UUID
    approval_id: Optional[uuid.UUID]
    status: str
    replayed: bool


@dataclass(frozen=True)
class Chunk:
    """A piece of a run's output, in order (seq increases)."""
    seq: int
    stream: str          # 'stdout' or 'stderr'
    data: str


@dataclass(frozen=True)
class Result:
    """What wait() returns.

    state       the invocation's state when the wait ended
    finished    whether that state is final (false: the wait's timeout
                passed first; the run goes on)
    exit_code   the payload's exit code, None when it did not exit (a
                signal, a timeout, not run)
    output_truncated  whether output past sandbox.output_limit was dropped
    credits_charged   what the run cost, net of a refund
    tool_call_id, output_preview, files   the tool call, once finished
    """
    invocation_id: uuid.UUID
    state: str
    finished: bool
    state_reason: Optional[str]
    exit_code: Optional[int]
    stdout: str
    stderr: str
    output_truncated: bool
    credits_charged: int
    tool_call_id: Optional[uuid.UUID]
    output_preview: Optional[str]
    files: list[dict[str, Any]]

    @property
    def succeeded(self) -> bool:
        """The run ended with exit code 0 (state 'succeeded')."""
        return self.state == "succeeded"


@dataclass(frozen=True)
class Card:
    """An approval card, as agent.pending_approvals() renders it."""
    approval_id: uuid.UUID
    invocation_id: uuid.UUID
    status: str
    title: str
    agent_name: Optional[str]
    conversation_id: Optional[uuid.UUID]
    language: str
    runtime: Optional[str]
    risk_level: Optional[str]
    description: Optional[str]
    code: Optional[str]
    code_sha256: str
    code_lines: Optional[int]
    requested_by: str
    created_at: datetime.datetime
    expires_at: Optional[datetime.datetime]
    decided_by: Optional[str]
    decided_at: Optional[datetime.datetime]
    decision_reason: Optional[str]
    credits_cost: Optional[int]
    org_balance: Optional[int]
    egress_may_reach: Optional[str]
    egress_sha256: Optional[str]
    image: Optional[str]
    image_digest: Optional[str]
    approval_policy_id: Optional[uuid.UUID]
    allowance_id: Optional[uuid.UUID]
    approved_by_policy: Optional[str]
    person_needed: Optional[str]
    isolation: Optional[str]


CARD_COLUMNS = tuple(Card.__dataclass_fields__)


@dataclass(frozen=True)
class FileInfo:
    """A file row of a conversation (agent.list_files)."""
    id: uuid.UUID
    name: str
    origin: str          # 'uploaded' or 'produced'
    status: str          # 'saved', 'skipped', 'failed', 'pruned'
    reason: Optional[str]
    size: Optional[int]
    sha256: Optional[str]
    content_type: Optional[str]
    invocation_id: Optional[uuid.UUID]
    created_at: datetime.datetime
    current: bool


FILE_COLUMNS = tuple(FileInfo.__dataclass_fields__)


@dataclass(frozen=True)
class Download:
    """A file's content (agent.download_file)."""
    name: str
    content_type: Optional[str]
    size: int
    sha256: str
    content: bytes
