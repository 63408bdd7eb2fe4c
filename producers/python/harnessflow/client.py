"""Client: queues events, batches them in a background thread and posts them to
harnessflow's HTTP ingest gateway (``harnessflow ingest``), with retries.

Lock order: Client has one lock (``_lock``); the three conditions share it.
The sender thread never holds it while it talks to the gateway.
"""

from __future__ import annotations

import atexit
import collections
import datetime as _dt
import http.client
import json
import logging
import math
import random
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from . import __version__
from .errors import (
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
from .events import TYPES as PRODUCER_TYPES
from .events import _timestamp

log = logging.getLogger("harnessflow")

#: The event types the pipeline derives itself: emit raises InternalTypeError
#: for them (the gateway would answer 400). Producers send PRODUCER_TYPES.
INTERNAL_TYPES = frozenset({"labeled_sample", "round_metrics", "rejected", "checkpoint_published"})

#: The envelope source set on events that have none (the Go SDK's is "sdk-go").
DEFAULT_SOURCE = "sdk-python"

#: HTTP statuses retried with backoff (besides connection errors and timeouts).
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})

#: How long close() waits by default for the queue to drain, in seconds.
DEFAULT_CLOSE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Stats:
    """A Client's counters since it was made (Client.stats())."""

    #: Events emit() accepted into the queue.
    emitted: int
    #: Events the gateway acknowledged (202: the brokers have them).
    delivered: int
    #: Events emit() refused because the queue was full (on_full="drop").
    dropped: int
    #: Events the gateway refused (400 invalid, 403 another project): RejectedError.
    rejected: int
    #: Events not delivered for any other reason: DeliveryError.
    failed: int
    #: Events waiting in the queue now (not counting the batch being sent).
    queued: int
    #: HTTP requests made, retries included.
    requests: int
    #: Requests that were retries of a retryable failure.
    retries: int


# One queued event: (sequence number, its JSON bytes, when it was queued).
_Item = Tuple[int, bytes, float]


def _json_default(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        return _timestamp(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class Client:
    """A client of the ingest gateway. Safe for use from several threads.

    ``Client(url, token)`` starts one background sender thread. ``emit(event)``
    queues an event (a dict, e.g. from ``harnessflow.events``); the sender
    posts the queue as NDJSON batches of up to ``batch_size`` events and
    ``batch_bytes`` bytes, as soon as a batch is full or its oldest event is
    ``batch_age`` seconds old, one request at a time (events keep their order).

    Args (all but url and token keyword-only; defaults in brackets):
        url: the gateway, ``http(s)://host:port`` or its full ``.../v1/events`` URL.
        token: the bearer token (a line of the gateway's tokens file).
        project: set on events without one [None: the gateway uses the token's].
        source: set on events without one ["sdk-python"].
        batch_size: most events per request [1000]; the gateway takes 10000.
        batch_bytes: most bytes per request [1000000]; an event larger than this
            is refused by emit (EventTooLargeError). Keep it below the
            gateway's --max-body (8 MiB).
        batch_age: seconds a batch waits for more events [0.05].
        queue_size: most events waiting to be sent [10000]; one batch more may
            be in flight.
        on_full: what emit does when the queue is full: "block" (wait for room,
            up to block_timeout) or "drop" (refuse the event, count it in
            stats().dropped, return False) ["block"].
        block_timeout: seconds emit waits for room before QueueFullError
            [None: as long as it takes].
        max_retry_time: seconds a batch may spend being retried, from its first
            request [60]; then its events fail (DeliveryError).
        backoff_initial, backoff_max: the retry delay is uniform in
            [0, min(backoff_max, backoff_initial * 2**(n-1))] before the n-th
            retry (exponential backoff, full jitter) [0.1, 5.0]; a Retry-After
            answer raises it to min(Retry-After, backoff_max).
        request_timeout: seconds one request may take [35: the gateway waits up
            to 30 s for the brokers before it answers 503].
        on_error: called on the sender thread with each HarnessflowError as it
            happens [None]; it must not block nor call flush/close. Errors are
            raised by flush()/close() whether or not it is set.

    Errors: emit raises at once for what it can see (not a dict, no "type",
    not JSON-serializable, too large, queue full, closed). Whatever happens to
    an event after emit returns (RejectedError, DeliveryError) is raised by the
    next flush() or close(), and logged on the "harnessflow" logger.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        project: Optional[str] = None,
        source: Optional[str] = DEFAULT_SOURCE,
        batch_size: int = 1000,
        batch_bytes: int = 1_000_000,
        batch_age: float = 0.05,
        queue_size: int = 10_000,
        on_full: str = "block",
        block_timeout: Optional[float] = None,
        max_retry_time: float = 60.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        request_timeout: float = 35.0,
        on_error: Optional[Callable[[HarnessflowError], None]] = None,
    ) -> None:
        problems = []
        parts = urlsplit(url or "")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(f"url {url!r}: want http(s)://host:port[/v1/events]")
        if not token or any(c.isspace() for c in token):
            problems.append("token: want a non-empty token without spaces")
        if batch_size < 1:
            problems.append(f"batch_size {batch_size}: must be at least 1")
        if batch_bytes < 1024:
            problems.append(f"batch_bytes {batch_bytes}: must be at least 1024")
        if batch_age < 0:
            problems.append(f"batch_age {batch_age}: must not be negative")
        if queue_size < 1:
            problems.append(f"queue_size {queue_size}: must be at least 1")
        if on_full not in ("block", "drop"):
            problems.append(f"on_full {on_full!r}: want 'block' or 'drop'")
        if block_timeout is not None and block_timeout < 0:
            problems.append(f"block_timeout {block_timeout}: must not be negative")
        if max_retry_time < 0:
            problems.append(f"max_retry_time {max_retry_time}: must not be negative")
        if backoff_initial <= 0 or backoff_max < backoff_initial:
            problems.append(f"backoff {backoff_initial}..{backoff_max}: want 0 < backoff_initial <= backoff_max")
        if request_timeout <= 0:
            problems.append(f"request_timeout {request_timeout}: must be positive")
        if problems:
            raise ValueError("harnessflow client: " + "; ".join(problems))

        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        path = parts.path if parts.path not in ("", "/") else "/v1/events"
        self._path = path + ("?" + parts.query if parts.query else "")
        self._url = f"{parts.scheme}://{parts.netloc}{self._path}"
        self._headers = {
            "Authorization": "Bearer " + token,
            "Content-Type": "application/x-ndjson",
            "User-Agent": f"harnessflow-python/{__version__}",
        }
        self._project = project
        self._source = source
        self._batch_size = batch_size
        self._batch_bytes = batch_bytes
        self._batch_age = batch_age
        self._queue_size = queue_size
        self._drop = on_full == "drop"
        self._block_timeout = block_timeout
        self._max_retry_time = max_retry_time
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._request_timeout = request_timeout
        self._on_error = on_error

        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the sender waits for events
        self._room = threading.Condition(self._lock)  # emit waits for queue room
        self._done = threading.Condition(self._lock)  # flush waits for batches
        self._queue: Deque[_Item] = collections.deque()
        self._queued_bytes = 0
        self._seq = 0  # last sequence number given to an event
        self._done_seq = 0  # every event up to it is delivered or failed
        self._flush_want = 0  # a flush waits for events up to it
        self._closed = False
        self._close_raised = False
        self._abort = threading.Event()  # close ran out of time: stop retrying
        self._errors: List[HarnessflowError] = []
        self._inflight = 0  # events of the batch being sent

        self._emitted = self._delivered = self._dropped = 0
        self._rejected = self._failed = self._requests = self._retries = 0

        self._conn: Optional[http.client.HTTPConnection] = None
        self._thread = threading.Thread(target=self._run, name="harnessflow-sender", daemon=True)
        self._thread.start()
        _live.add(self)

    def __repr__(self) -> str:
        return f"<harnessflow.Client {self._url}>"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Close (flushing). If the block raised, a close error is logged, not
        raised, so that it does not hide the block's exception."""
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except HarnessflowError as err:
            log.error("harnessflow: closing after %s: %s", exc_type.__name__, err)

    # ---- emitting ----------------------------------------------------------

    def emit(self, event: Mapping[str, Any]) -> bool:
        """Queue one event; return True, or False if it was dropped (on_full="drop").

        The event is a mapping with "type" and the fields of its schema; it is
        copied, and event_time (now), source and project (from the client) are
        set where absent. It is serialized here, so a value JSON cannot carry
        raises TypeError or ValueError at once. Raises InternalTypeError for
        one of INTERNAL_TYPES (the pipeline's derived types), EventTooLargeError,
        QueueFullError (on_full="block" after block_timeout), ClosedError.
        Delivery problems are raised later by flush() or close().
        """
        if not isinstance(event, Mapping):
            raise TypeError(f"emit: want a dict, got {type(event).__name__}")
        if not isinstance(event.get("type"), str) or not event["type"]:
            raise ValueError('emit: the event has no "type" (e.g. "task_attempt")')
        if event["type"] in INTERNAL_TYPES:
            raise InternalTypeError(
                f"emit: {event['type']} events are written by the pipeline itself, not by producers; "
                f"send one of {', '.join(PRODUCER_TYPES)}"
            )
        ev = dict(event)
        if ev.get("event_time") is None:
            ev["event_time"] = int(time.time() * 1000)
        if ev.get("source") is None and self._source:
            ev["source"] = self._source
        if ev.get("project") is None and self._project:
            ev["project"] = self._project
        data = json.dumps(ev, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_json_default).encode("utf-8")
        if len(data) > self._batch_bytes:
            raise EventTooLargeError(f"emit: {ev['type']} event is {len(data)} bytes of JSON, above batch_bytes ({self._batch_bytes})")
        dropped = 0
        with self._lock:
            if self._closed:
                raise ClosedError("emit after close")
            if len(self._queue) >= self._queue_size:
                if self._drop:
                    self._dropped += 1
                    dropped = self._dropped
                else:
                    self._wait_for_room()
            if not dropped:
                self._seq += 1
                self._queue.append((self._seq, data, time.monotonic()))
                self._queued_bytes += len(data) + 1
                self._emitted += 1
                n = len(self._queue)
                if n == 1 or n >= self._batch_size or self._queued_bytes >= self._batch_bytes:
                    self._wake.notify()
        if dropped:
            if _power_of_ten(dropped):
                log.warning("harnessflow: queue full (%d events): dropped an event, %d dropped so far", self._queue_size, dropped)
            return False
        return True

    def _wait_for_room(self) -> None:
        """Wait (lock held) until the queue has room; raise if closed or timed out."""
        deadline = None if self._block_timeout is None else time.monotonic() + self._block_timeout
        while len(self._queue) >= self._queue_size and not self._closed:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise QueueFullError(f"emit: queue full ({self._queue_size} events) for {self._block_timeout}s")
            self._room.wait(remaining)
        if self._closed:
            raise ClosedError("emit after close")

    # ---- flushing and closing ---------------------------------------------

    def flush(self, timeout: Optional[float] = None) -> None:
        """Send everything emitted before the call now and wait until each event
        is delivered or has failed; then raise the first error recorded since
        the last flush/close (RejectedError, DeliveryError; ``.errors`` has all).

        timeout: seconds to wait [None: until done; each batch is bounded by
        max_retry_time]; past it FlushTimeoutError is raised and the events
        are still being sent. Raises ClosedError after close().
        """
        with self._lock:
            if self._closed:
                raise ClosedError("flush after close")
            target = self._seq
            self._flush_want = max(self._flush_want, target)
            self._wake.notify()
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._done_seq < target:
                remaining = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                if remaining <= 0:
                    raise FlushTimeoutError(f"flush: {target - self._done_seq} event(s) still being sent after {timeout}s")
                if not self._thread.is_alive():
                    break  # cannot happen short of interpreter shutdown
                self._done.wait(remaining)
        self._raise_errors()

    def close(self, timeout: Optional[float] = DEFAULT_CLOSE_TIMEOUT) -> None:
        """Stop accepting events, deliver the queue and stop the sender; then
        raise the first error recorded since the last flush (as flush does).

        timeout: seconds to wait for the queue to drain [60; None: as long as
        it takes]. Past it, the events still queued fail (DeliveryError) and a
        batch being retried stops retrying. Idempotent: a second call does
        nothing. Called on interpreter exit for clients not closed (errors
        are then logged). Must not be called from on_error.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("harnessflow: close called from the sender thread (on_error)")
        with self._lock:
            if self._close_raised:
                return
            self._closed = True
            self._wake.notify_all()
            self._room.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            with self._lock:
                n = len(self._queue)
                self._queue.clear()
                self._queued_bytes = 0
                self._abort.set()
                self._wake.notify_all()
            if n:
                self._fail(DeliveryError(f"close: {n} event(s) not sent within {timeout}s", failed=n))
            self._thread.join(min(1.0, self._request_timeout))
            with self._lock:
                inflight = self._inflight if self._thread.is_alive() else 0
            if inflight:
                # Not counted failed: the gateway may still take them; the
                # sender logs a failure and passes it to on_error.
                self._record(DeliveryError(
                    f"close: a batch of {inflight} event(s) still being sent after {timeout}s; "
                    "its outcome is logged on the harnessflow logger", failed=inflight))
        with self._lock:
            self._close_raised = True
        _live.discard(self)
        self._raise_errors()

    def stats(self) -> Stats:
        """Return the counters (a snapshot)."""
        with self._lock:
            return Stats(
                emitted=self._emitted,
                delivered=self._delivered,
                dropped=self._dropped,
                rejected=self._rejected,
                failed=self._failed,
                queued=len(self._queue),
                requests=self._requests,
                retries=self._retries,
            )

    def _raise_errors(self) -> None:
        with self._lock:
            errs, self._errors = self._errors, []
        if errs:
            first = errs[0]
            first.errors = errs
            raise first

    def _record(self, err: HarnessflowError) -> None:
        with self._lock:
            self._errors.append(err)
        log.warning("harnessflow: %s", err)
        if self._on_error is not None:
            try:
                self._on_error(err)
            except Exception:  # noqa: BLE001 - a callback's bug must not stop the sender
                log.exception("harnessflow: on_error raised")

    def _fail(self, err: DeliveryError) -> None:
        with self._lock:
            self._failed += err.failed
        self._record(err)

    # ---- the sender thread -------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                batch = self._take()
            if batch is None:
                if self._conn is not None:  # the sender owns the connection
                    self._conn.close()
                    self._conn = None
                return
            with self._lock:
                self._inflight = len(batch)
            try:
                self._deliver([item[1] for item in batch])
            except Exception as exc:  # noqa: BLE001 - a bug here must surface, not kill the thread
                err = DeliveryError(f"internal error sending {len(batch)} event(s): {exc!r}", failed=len(batch))
                err.__cause__ = exc
                self._fail(err)
            with self._lock:
                self._done_seq = batch[-1][0]
                self._inflight = 0
                self._done.notify_all()

    def _take(self) -> Optional[List[_Item]]:
        """Wait (lock held) for a batch to be due and take it; None when closed and empty."""
        q = self._queue
        while True:
            if self._abort.is_set():
                return None
            if not q:
                if self._closed:
                    return None
                self._wake.wait()
                continue
            due = (
                len(q) >= self._batch_size
                or self._queued_bytes >= self._batch_bytes
                or self._closed
                or self._flush_want > self._done_seq
            )
            if not due:
                wait = q[0][2] + self._batch_age - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
            batch: List[_Item] = []
            size = 0
            while q and len(batch) < self._batch_size:
                item = q[0]
                if batch and size + len(item[1]) + 1 > self._batch_bytes:
                    break
                q.popleft()
                batch.append(item)
                size += len(item[1]) + 1
            self._queued_bytes -= size
            self._room.notify_all()
            return batch

    def _deliver(self, pending: List[bytes]) -> None:
        """Post pending until the gateway took every event or refused it, or the
        retries ran past max_retry_time. Records every failure."""
        deadline = time.monotonic() + self._max_retry_time
        tries = 0  # requests of this batch, retries included
        failures = 0  # consecutive retryable failures
        while pending:
            tries += 1
            with self._lock:
                self._requests += 1
            status, retry_after, body, exc = self._post(b"\n".join(pending), deadline)
            if status == 202:
                with self._lock:
                    self._delivered += len(pending)
                return
            if status in (400, 403):
                items = _item_errors(body, len(pending))
                if items:
                    bad = {i for i, _ in items}
                    rejected = [ItemError(i, msg, _decode(pending[i])) for i, msg in items]
                    with self._lock:
                        self._rejected += len(bad)
                    self._record(RejectedError(status, rejected))
                    # Nothing of the request was produced: send the others again.
                    pending = [d for i, d in enumerate(pending) if i not in bad]
                    continue
            if status is None or status in RETRYABLE_STATUSES:
                failures += 1
                delay = self._backoff(failures, retry_after)
                what = f"{exc!r}" if status is None else f"{status} {_snippet(body)}"
                if time.monotonic() + delay > deadline:
                    err = DeliveryError(
                        f"{len(pending)} event(s) not delivered after {tries} request(s) in "
                        f"{self._max_retry_time}s (max_retry_time); last: {what}",
                        failed=len(pending), status=status, attempts=tries,
                    )
                    err.__cause__ = exc
                    self._fail(err)
                    return
                log.debug("harnessflow: retrying %d event(s) in %.3fs after %s", len(pending), delay, what)
                if self._abort.wait(delay):
                    err = DeliveryError(f"{len(pending)} event(s) not delivered: closed while retrying (last: {what})",
                                        failed=len(pending), status=status, attempts=tries)
                    err.__cause__ = exc
                    self._fail(err)
                    return
                with self._lock:
                    self._retries += 1
                continue
            self._fail(DeliveryError(
                f"{len(pending)} event(s) not delivered: the gateway answered {status}: {_snippet(body)}",
                failed=len(pending), status=status, attempts=tries,
            ))
            return

    def _backoff(self, failures: int, retry_after: Optional[float]) -> float:
        cap = min(self._backoff_max, self._backoff_initial * (2 ** min(failures - 1, 62)))
        delay = random.uniform(0, cap)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self._backoff_max))
        return delay

    def _post(self, body: bytes, deadline: float) -> Tuple[Optional[int], Optional[float], bytes, Optional[BaseException]]:
        """One POST: (status, Retry-After seconds, body, None), or (None, None, b"", exc)."""
        timeout = max(0.5, min(self._request_timeout, deadline - time.monotonic()))
        conn = self._conn
        if conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = self._conn = cls(self._host, self._port, timeout=timeout)
        try:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            conn.request("POST", self._path, body=body, headers=self._headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.will_close:
                conn.close()
                self._conn = None
            return resp.status, _retry_after(resp.getheader("Retry-After")), data, None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            self._conn = None
            return None, None, b"", exc


def _item_errors(body: bytes, n: int) -> List[Tuple[int, str]]:
    """The gateway's [{index, error}] answer, one entry per index; [] if it is
    not one or names an index outside the request."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return []
    if not isinstance(parsed, list) or not parsed:
        return []
    out: Dict[int, str] = {}
    for it in parsed:
        if not isinstance(it, dict):
            return []
        i, msg = it.get("index"), it.get("error")
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n:
            return []
        out[i] = msg if i not in out else out[i] + "; " + str(msg)
    return sorted(out.items())


def _decode(data: bytes) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _snippet(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    return text if len(text) <= 300 else text[:300] + "..."


def _retry_after(value: Optional[str]) -> Optional[float]:
    if not value:
        return None
    try:
        secs = float(value)
    except ValueError:
        return None  # an HTTP date: ignored
    return secs if math.isfinite(secs) and secs >= 0 else None


def _power_of_ten(n: int) -> bool:
    while n % 10 == 0:
        n //= 10
    return n == 1


_live: "weakref.WeakSet[Client]" = weakref.WeakSet()

#: How long the exit hook lets each unclosed client drain, in seconds.
EXIT_CLOSE_TIMEOUT = 30.0


@atexit.register
def _close_at_exit() -> None:
    """Close the clients the program did not close, logging their errors."""
    for c in list(_live):
        try:
            c.close(EXIT_CLOSE_TIMEOUT)
        except HarnessflowError as err:
            log.error("harnessflow: at exit, %r: %s", c, err)
