"""The client's exceptions: what the database said, kept as it said it.

Every error the SQL API raises reaches the caller as a SandboxError that
carries its SQLSTATE (docs/reference.md lists each function's) and the
product's message, detail and hint.  A request the policy refuses is not
an error in SQL (the refusal is a returned status, so that its audit
event survives); the client raises it as Refused, after the commit.
"""
from __future__ import annotations

from typing import Optional

import psycopg


class SandboxError(Exception):
    """An error of the SQL API: SQLSTATE, message, detail, hint."""

    def __init__(self, sqlstate: Optional[str], message: str,
                 detail: Optional[str] = None, hint: Optional[str] = None) -> None:
        super().__init__(f"{sqlstate}: {message}" if sqlstate else message)
        self.sqlstate = sqlstate
        self.message = message
        self.detail = detail
        self.hint = hint

    @classmethod
    def from_psycopg(cls, e: psycopg.Error) -> "SandboxError":
        diag = e.diag
        message = diag.message_primary or str(e).strip() or type(e).__name__
        return cls(e.sqlstate, message, diag.message_detail, diag.message_hint)


class Refused(SandboxError):
    """A request the policy refused (request_execution's status 'denied').

    sqlstate is the refusal's (42501 plan or toggles, 53000 credits, ...),
    message its reason code (e.g. 'insufficient_credits'); the refusal was
    audited and committed.
    """

    def __init__(self, sqlstate: Optional[str], reason: str) -> None:
        super().__init__(sqlstate, reason)
        self.reason = reason
