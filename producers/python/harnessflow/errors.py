"""The exceptions of the harnessflow client, all subclasses of HarnessflowError."""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class HarnessflowError(Exception):
    """Base class of every error the client raises.

    flush() and close() raise the first error recorded since the previous
    flush/close; its ``errors`` attribute lists all of them (itself first),
    so that nothing the background sender met is lost.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.errors: List[HarnessflowError] = [self]

    def __str__(self) -> str:
        text = super().__str__()
        if len(self.errors) > 1:
            text += f" (and {len(self.errors) - 1} more error(s): see .errors)"
        return text


class ItemError:
    """One rejected event: the gateway's ``{index, error}`` plus the event itself.

    ``index`` is the event's position in the request the client sent (not in
    the order of emit calls); ``error`` is the gateway's message, which names
    the field ("task_attempt.score: 1.5 is outside [0,1]"); ``event`` is the
    event as it was sent (None if it could not be decoded back).
    """

    __slots__ = ("index", "error", "event")

    def __init__(self, index: int, error: str, event: Optional[Dict[str, Any]] = None) -> None:
        self.index = index
        self.error = error
        self.event = event

    def __repr__(self) -> str:
        return f"ItemError(index={self.index}, error={self.error!r})"


class RejectedError(HarnessflowError):
    """The gateway refused some events: 400 (invalid) or 403 (another project).

    ``status`` is the HTTP status and ``items`` the refused events (ItemError).
    The other events of the same request were sent again without them, so only
    the events in ``items`` are lost.
    """

    def __init__(self, status: int, items: List[ItemError]) -> None:
        shown = "; ".join(f"[{it.index}] {it.error}" for it in items[:5])
        more = f"; and {len(items) - 5} more" if len(items) > 5 else ""
        super().__init__(f"gateway rejected {len(items)} event(s) ({status}): {shown}{more}")
        self.status = status
        self.items = items


class DeliveryError(HarnessflowError):
    """Events the client could not deliver.

    Either the gateway answered a permanent error (401 unknown token, 413 too
    large, another 4xx or 500), or the retries of a retryable failure (503,
    429, 502, 504, a connection error or timeout) ran past ``max_retry_time``,
    or close() ran out of time. ``failed`` is the number of events lost,
    ``status`` the last HTTP status (None for a connection error), ``attempts``
    the number of requests tried and ``__cause__`` the last exception if any.
    """

    def __init__(self, message: str, *, failed: int, status: Optional[int] = None, attempts: int = 0) -> None:
        super().__init__(message)
        self.failed = failed
        self.status = status
        self.attempts = attempts


class QueueFullError(HarnessflowError):
    """emit() with ``on_full="block"`` waited ``block_timeout`` seconds for room in vain."""


class EventTooLargeError(HarnessflowError, ValueError):
    """An event whose JSON is larger than ``batch_bytes``: it could never be sent."""


class InternalTypeError(HarnessflowError, ValueError):
    """An event of a type the pipeline derives itself (labeled_sample,
    round_metrics, rejected, checkpoint_published): producers may not send
    one, and the gateway refuses it (400). See ``harnessflow.INTERNAL_TYPES``."""


class ClosedError(HarnessflowError):
    """emit() or flush() after close()."""


class FlushTimeoutError(HarnessflowError, TimeoutError):
    """flush(timeout) returned before every earlier event was delivered or failed.

    Nothing is lost: the events are still being sent.
    """
