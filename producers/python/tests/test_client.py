"""Client against a live `harnessflow ingest` (started by sdk_test.go).

Events these tests expect on the topics (or expect absent) are reported to
the Go test, which reads the topics back."""

from __future__ import annotations

import logging
import threading
import time
import unittest

import harnessflow
from harnessflow import events

from _live import FaultProxy, expect_absent, expect_delivered, free_port_url, ids, require_live

logging.getLogger("harnessflow").addHandler(logging.NullHandler())
logging.getLogger("harnessflow").propagate = False


def attempt(event_id: str, i: int = 0, **kw: object) -> dict:
    fields = dict(cell_id="py-cell", task_id=f"task-{i}", attempt=1, status="ok", score=1.0,
                  success=True, cycle=i // 10, stream_idx=i, input_tokens=100, output_tokens=20)
    fields.update(kw)
    return events.task_attempt(event_id=event_id, **fields)  # type: ignore[arg-type]


def wait_until(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


class LiveTest(unittest.TestCase):
    def setUp(self) -> None:
        self.url, self.token, self.project = require_live(self)
        self.proxies = []

    def tearDown(self) -> None:
        for p in self.proxies:
            p.close()

    def proxy(self, *script: str, retry_after: str = "") -> FaultProxy:
        p = FaultProxy(self.url, list(script), retry_after)
        self.proxies.append(p)
        return p


class TestDelivery(LiveTest):
    def test_batch_delivered(self) -> None:
        eids = ids("batch", 120)
        c = harnessflow.Client(self.url, token=self.token, batch_size=50)
        for i, eid in enumerate(eids):
            self.assertTrue(c.emit(attempt(eid, i)))
        c.flush()
        st = c.stats()
        self.assertEqual(st.delivered, 120)
        self.assertGreaterEqual(st.requests, 3)  # batches of at most 50
        self.assertEqual((st.dropped, st.rejected, st.failed, st.queued), (0, 0, 0, 0))
        c.close()
        expect_delivered(eids)

    def test_batches_capped_by_bytes(self) -> None:
        p = self.proxy("forward")
        eids = ids("bytes", 30)
        c = harnessflow.Client(p.url, token=self.token, batch_bytes=4096, batch_age=0.5)
        for i, eid in enumerate(eids):
            c.emit(attempt(eid, i, task_input="x" * 300))
        c.close()
        self.assertEqual(c.stats().delivered, 30)
        self.assertGreater(len(p.sizes), 2)
        self.assertLessEqual(max(p.sizes), 4096)
        expect_delivered(eids)

    def test_batch_sent_when_old(self) -> None:
        eids = ids("age", 1)
        c = harnessflow.Client(self.url, token=self.token, batch_size=1000, batch_age=0.1)
        c.emit(attempt(eids[0]))
        # No flush: the age of the batch alone sends it.
        self.assertTrue(wait_until(lambda: c.stats().delivered == 1), c.stats())
        c.close()
        expect_delivered(eids)

    def test_context_manager_flushes(self) -> None:
        eids = ids("ctx", 5)
        with harnessflow.Client(self.url, token=self.token, batch_age=60) as c:
            for i, eid in enumerate(eids):
                c.emit(attempt(eid, i))
            self.assertEqual(c.stats().delivered, 0)  # a minute-old batch: only close sends it
        self.assertEqual(c.stats().delivered, 5)
        with self.assertRaises(harnessflow.ClosedError):
            c.emit(attempt("never"))
        c.close()  # idempotent
        expect_delivered(eids)

    def test_envelope_filled(self) -> None:
        # project from the client must be the token's; source and event_time filled.
        eids = ids("envelope", 1)
        with harnessflow.Client(self.url, token=self.token, project=self.project or None, source="py-test") as c:
            c.emit({"type": "cell_finished", "event_id": eids[0], "cell_id": "py-cell", "status": "completed"})
        expect_delivered(eids)


class TestRejected(LiveTest):
    def test_bad_field_named(self) -> None:
        good, bad = ids("good", 2), ids("bad", 2)
        c = harnessflow.Client(self.url, token=self.token, batch_age=60)
        c.emit(attempt(good[0], 0))
        c.emit(attempt(bad[0], 1, score=1.5))  # outside [0, 1]
        no_task = attempt(bad[1], 2)
        del no_task["task_id"]
        c.emit(no_task)
        c.emit(attempt(good[1], 3))
        with self.assertRaises(harnessflow.RejectedError) as cm:
            c.flush()
        err = cm.exception
        self.assertEqual(err.status, 400)
        self.assertEqual([it.index for it in err.items], [1, 2])
        self.assertIn("score", err.items[0].error)
        self.assertEqual(err.items[0].event["event_id"], bad[0])
        self.assertIn('"task_id"', err.items[1].error)
        self.assertIn("score", str(err))
        # The valid events of the same request were sent again, without the bad ones.
        st = c.stats()
        self.assertEqual((st.delivered, st.rejected, st.failed), (2, 2, 0))
        c.flush()  # the error was raised once
        c.close()
        expect_delivered(good)
        expect_absent(bad)

    def test_other_project_refused(self) -> None:
        bad = ids("project", 1)
        c = harnessflow.Client(self.url, token=self.token)
        c.emit(attempt(bad[0], project="not-" + (self.project or "x")))
        with self.assertRaises(harnessflow.RejectedError) as cm:
            c.close()
        self.assertEqual(cm.exception.status, 403)
        self.assertIn("project", cm.exception.items[0].error)
        expect_absent(bad)

    def test_unknown_token_not_retried(self) -> None:
        bad = ids("token", 1)
        c = harnessflow.Client(self.url, token="not-a-token", backoff_initial=0.01)
        c.emit(attempt(bad[0]))
        with self.assertRaises(harnessflow.DeliveryError) as cm:
            c.flush()
        self.assertEqual((cm.exception.status, cm.exception.attempts, cm.exception.failed), (401, 1, 1))
        c.close()
        expect_absent(bad)

    def test_errors_reach_on_error_and_logs(self) -> None:
        seen = []
        bad = ids("callback", 1)
        c = harnessflow.Client(self.url, token=self.token, on_error=seen.append)
        c.emit(attempt(bad[0], score=-1))
        with self.assertLogs("harnessflow", level="WARNING") as logs:
            with self.assertRaises(harnessflow.RejectedError):
                c.close()
        self.assertEqual(len(seen), 1)
        self.assertIsInstance(seen[0], harnessflow.RejectedError)
        self.assertIn("score", logs.output[0])
        expect_absent(bad)


class TestRetries(LiveTest):
    def test_retry_on_503(self) -> None:
        p = self.proxy("503", "503", "forward")
        eids = ids("retry", 3)
        c = harnessflow.Client(p.url, token=self.token, backoff_initial=0.01, backoff_max=0.05)
        for i, eid in enumerate(eids):
            c.emit(attempt(eid, i))
        c.flush()
        st = c.stats()
        self.assertEqual((p.count("503"), p.count("forward")), (2, 1))
        self.assertEqual((st.delivered, st.requests, st.retries, st.failed), (3, 3, 2, 0))
        c.close()
        expect_delivered(eids)

    def test_retry_on_429_after_retry_after(self) -> None:
        p = self.proxy("429", "forward", retry_after="1")
        eids = ids("ratelimit", 1)
        c = harnessflow.Client(p.url, token=self.token, backoff_initial=0.01, backoff_max=0.3)
        c.emit(attempt(eids[0]))
        start = time.monotonic()
        c.close()
        # Retry-After (1 s) raises the delay, up to backoff_max.
        self.assertGreaterEqual(time.monotonic() - start, 0.29)
        self.assertEqual((p.count("429"), c.stats().delivered), (1, 1))
        expect_delivered(eids)

    def test_500_not_retried(self) -> None:
        p = self.proxy("500")
        c = harnessflow.Client(p.url, token=self.token)
        c.emit(attempt("server-error"))
        with self.assertRaises(harnessflow.DeliveryError) as cm:
            c.close()
        self.assertEqual((cm.exception.status, cm.exception.attempts, p.count("500")), (500, 1, 1))

    def test_retries_bounded_by_deadline(self) -> None:
        p = self.proxy("503")
        eids = ids("deadline", 2)
        c = harnessflow.Client(p.url, token=self.token, max_retry_time=0.5, backoff_initial=0.05, backoff_max=0.2)
        for eid in eids:
            c.emit(attempt(eid))
        start = time.monotonic()
        with self.assertRaises(harnessflow.DeliveryError) as cm:
            c.flush()
        took = time.monotonic() - start
        self.assertLess(took, 3.0)
        self.assertEqual((cm.exception.status, cm.exception.failed), (503, 2))
        self.assertGreater(cm.exception.attempts, 1)
        self.assertEqual(c.stats().failed, 2)
        c.close()
        expect_absent(eids)

    def test_connection_refused_retried_then_fails(self) -> None:
        c = harnessflow.Client(free_port_url(), token=self.token, max_retry_time=0.3, backoff_initial=0.02)
        c.emit(attempt("unsent"))
        start = time.monotonic()
        with self.assertRaises(harnessflow.DeliveryError) as cm:
            c.close()
        self.assertLess(time.monotonic() - start, 3.0)
        self.assertIsNone(cm.exception.status)
        self.assertIsInstance(cm.exception.__cause__, ConnectionError)
        self.assertGreater(cm.exception.attempts, 1)


class TestBackoff(unittest.TestCase):
    def test_full_jitter_bounds(self) -> None:
        c = harnessflow.Client("http://127.0.0.1:9", token="t", backoff_initial=0.1, backoff_max=1.0)
        try:
            for n, cap in ((1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (40, 1.0)):
                delays = [c._backoff(n, None) for _ in range(200)]
                self.assertTrue(all(0 <= d <= cap for d in delays), (n, max(delays)))
                self.assertLess(min(delays), cap / 2)  # jitter spreads them from 0
            self.assertTrue(all(0.5 <= c._backoff(1, 0.5) <= 1.0 for _ in range(50)))
            self.assertTrue(all(c._backoff(1, 30) == 1.0 for _ in range(50)))  # capped by backoff_max
        finally:
            c.close()


class TestQueuePolicy(LiveTest):
    def test_drop_when_full(self) -> None:
        p = self.proxy("hold", "forward")
        eids = ids("drop", 9)
        c = harnessflow.Client(p.url, token=self.token, queue_size=5, on_full="drop", batch_size=1, batch_age=0)
        self.assertTrue(c.emit(attempt(eids[0], 0)))
        self.assertTrue(p.held.wait(10), "the first batch never reached the proxy")
        # eids[0] is in flight; 5 fit in the queue; the rest are dropped.
        with self.assertLogs("harnessflow", level="WARNING") as logs:
            kept = [c.emit(attempt(eid, i)) for i, eid in enumerate(eids[1:], 1)]
        self.assertEqual(kept, [True] * 5 + [False] * 3)
        self.assertIn("dropped", logs.output[0])
        self.assertEqual(c.stats().dropped, 3)
        p.release()
        c.flush()  # drops are counted, not raised
        st = c.stats()
        self.assertEqual((st.emitted, st.delivered, st.dropped, st.failed), (6, 6, 3, 0))
        c.close()
        expect_delivered(eids[:6])
        expect_absent(eids[6:])

    def test_block_until_timeout(self) -> None:
        p = self.proxy("hold", "forward")
        eids = ids("block", 3)
        c = harnessflow.Client(p.url, token=self.token, queue_size=1, block_timeout=0.2, batch_size=1, batch_age=0)
        c.emit(attempt(eids[0], 0))
        self.assertTrue(p.held.wait(10))
        c.emit(attempt(eids[1], 1))  # fills the queue
        start = time.monotonic()
        with self.assertRaises(harnessflow.QueueFullError):
            c.emit(attempt(eids[2], 2))
        self.assertGreaterEqual(time.monotonic() - start, 0.15)
        p.release()
        c.close()
        self.assertEqual(c.stats().delivered, 2)
        expect_delivered(eids[:2])
        expect_absent(eids[2:])

    def test_block_waits_for_room(self) -> None:
        p = self.proxy("hold", "forward")
        eids = ids("wait", 3)
        c = harnessflow.Client(p.url, token=self.token, queue_size=1, batch_size=1, batch_age=0)
        c.emit(attempt(eids[0], 0))
        self.assertTrue(p.held.wait(10))
        c.emit(attempt(eids[1], 1))  # fills the queue
        t = threading.Thread(target=c.emit, args=(attempt(eids[2], 2),))
        t.start()
        t.join(0.2)
        self.assertTrue(t.is_alive(), "emit did not block on a full queue")
        p.release()
        t.join(10)
        self.assertFalse(t.is_alive())
        c.close()
        self.assertEqual(c.stats().delivered, 3)
        expect_delivered(eids)

    def test_close_timeout_reports_what_is_unsent(self) -> None:
        p = self.proxy("hold", "forward")  # released only by tearDown
        eids = ids("closing", 3)
        c = harnessflow.Client(p.url, token=self.token, batch_size=1, batch_age=0)
        c.emit(attempt(eids[0], 0))
        self.assertTrue(p.held.wait(10))
        c.emit(attempt(eids[1], 1))
        c.emit(attempt(eids[2], 2))
        start = time.monotonic()
        with self.assertRaises(harnessflow.DeliveryError) as cm:
            c.close(timeout=0.3)
        self.assertLess(time.monotonic() - start, 3.0)
        self.assertEqual(cm.exception.failed, 2)  # the queued ones
        self.assertIn("not sent", str(cm.exception))
        self.assertEqual(len(cm.exception.errors), 2)
        self.assertIn("still being sent", str(cm.exception.errors[1]))  # the batch in flight
        self.assertEqual(c.stats().failed, 2)
        c.close()  # idempotent
        expect_absent(eids[1:])  # eids[0] goes through once the proxy lets it

    def test_emit_refuses_what_it_can_see(self) -> None:
        c = harnessflow.Client(self.url, token=self.token, batch_bytes=2048)
        with self.assertRaises(TypeError):
            c.emit(["not", "a", "dict"])  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            c.emit({"cell_id": "no type"})
        with self.assertRaises(ValueError):
            c.emit(attempt("nan", score=float("nan")))
        with self.assertRaises(harnessflow.EventTooLargeError):
            c.emit(attempt("big", task_input="x" * 4096))
        with self.assertRaises(ValueError):
            events.task_attempt(cell_id="c", task_id="t", attempt=1, status="done", score=1.0, success=True)
        c.close()
        with self.assertRaises(ValueError):
            harnessflow.Client("ftp://x", token="t", batch_size=0)


if __name__ == "__main__":
    unittest.main()


class TestInternalTypes(unittest.TestCase):
    """emit refuses the pipeline's derived types at once (no gateway needed)."""

    def test_derived_types_raise(self) -> None:
        c = harnessflow.Client(free_port_url(), token="t", batch_age=60)
        try:
            for typ in sorted(harnessflow.INTERNAL_TYPES):
                with self.assertRaises(harnessflow.InternalTypeError) as cm:
                    c.emit({"type": typ, "cell_id": "c"})
                self.assertIn(typ, str(cm.exception))
                self.assertIn("task_attempt", str(cm.exception))
                self.assertIsInstance(cm.exception, ValueError)
            self.assertEqual(c.stats().emitted, 0)
        finally:
            c.close(timeout=1)
        self.assertEqual(set(harnessflow.PRODUCER_TYPES) & harnessflow.INTERNAL_TYPES, set())
