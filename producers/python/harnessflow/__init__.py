"""harnessflow: send events to harnessflow's HTTP ingest gateway from Python.

    import harnessflow
    from harnessflow import events

    with harnessflow.Client("http://127.0.0.1:8080", token="T") as hf:
        hf.emit(events.task_attempt(cell_id="c1", task_id="t1", attempt=1,
                                    status="ok", score=1.0, success=True))

Standard library only; see README.md for batching, retries, the queue policy
and the errors.
"""

__version__ = "0.1.0"

from . import events  # noqa: E402
from .client import DEFAULT_SOURCE, INTERNAL_TYPES, PRODUCER_TYPES, RETRYABLE_STATUSES, Client, Stats  # noqa: E402
from .errors import (  # noqa: E402
    ClosedError,
    DeliveryError,
    EventTooLargeError,
    FlushTimeoutError,
    HarnessflowError,
    InternalTypeError,
    ItemError,
    QueueFullError,
    RejectedError,
)

__all__ = [
    "Client",
    "Stats",
    "DEFAULT_SOURCE",
    "RETRYABLE_STATUSES",
    "events",
    "HarnessflowError",
    "RejectedError",
    "ItemError",
    "DeliveryError",
    "QueueFullError",
    "EventTooLargeError",
    "ClosedError",
    "FlushTimeoutError",
    "InternalTypeError",
    "INTERNAL_TYPES",
    "PRODUCER_TYPES",
]
