"""What the live tests share: the gateway under test (from the Go test that
started it), the report of event ids it checks on the topics, and a fault
injector: a local HTTP proxy that answers 503, holds requests or forwards
them to the gateway.

Environment, set by sdk_test.go:
    HF_TEST_URL          the gateway's base URL (http://127.0.0.1:PORT)
    HF_TEST_TOKEN        a token of HF_TEST_PROJECT
    HF_TEST_PROJECT      the token's project
    HF_TEST_REPORT       file to append "+ID" (must be on the topics) and
                         "-ID" (must not) lines to
    HF_TEST_REQUIRED     JSON {type: [fields the JSON form requires]}
    HF_TEST_REQUIRE_LIVE "1": a missing gateway is a failure, not a skip
"""

from __future__ import annotations

import http.client
import http.server
import os
import threading
import unittest
import uuid
from typing import Iterable, List, Tuple
from urllib.parse import urlsplit

RUN = uuid.uuid4().hex[:8]


def require_live(tc: unittest.TestCase) -> Tuple[str, str, str]:
    """Return (url, token, project) of the live gateway, or skip the test."""
    url, token = os.environ.get("HF_TEST_URL"), os.environ.get("HF_TEST_TOKEN")
    if not url or not token:
        if os.environ.get("HF_TEST_REQUIRE_LIVE") == "1":
            tc.fail("HF_TEST_URL and HF_TEST_TOKEN are not set")
        tc.skipTest("no live gateway: run `go test ./producers/python/` (it starts one)")
    return url, token, os.environ.get("HF_TEST_PROJECT", "")


def ids(prefix: str, n: int) -> List[str]:
    """n event ids unique to this run."""
    return [f"py-{RUN}-{prefix}-{i:04d}" for i in range(n)]


def _report(sign: str, event_ids: Iterable[str]) -> None:
    path = os.environ.get("HF_TEST_REPORT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        for i in event_ids:
            f.write(sign + i + "\n")


def expect_delivered(event_ids: Iterable[str]) -> None:
    """Tell the Go test these events must be on the topics."""
    _report("+", event_ids)


def expect_absent(event_ids: Iterable[str]) -> None:
    """Tell the Go test these events must not be on the topics."""
    _report("-", event_ids)


class FaultProxy:
    """A local HTTP server in front of the gateway, for the client's retry and
    queue logic: each request takes the next action of ``script`` (the last
    one repeats): a status ("503", "429") is answered without forwarding
    (with Retry-After: retry_after when given), "hold" waits for release()
    and then forwards, "forward" forwards to the gateway."""

    def __init__(self, upstream: str, script: List[str], retry_after: str = "") -> None:
        self.upstream = urlsplit(upstream)
        self.script = list(script)
        self.retry_after = retry_after
        self.lock = threading.Lock()
        self.actions: List[str] = []
        self.sizes: List[int] = []
        self.held = threading.Event()  # a "hold" request arrived
        self.released = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with proxy.lock:
                    i = len(proxy.actions)
                    action = proxy.script[min(i, len(proxy.script) - 1)]
                    proxy.actions.append(action)
                    proxy.sizes.append(len(body))
                if action.isdigit():
                    self._answer(int(action), b'{"error":"injected fault"}\n', proxy.retry_after)
                    return
                if action == "hold":
                    proxy.held.set()
                    proxy.released.wait(30)
                status, data = proxy.forward(self.path, body, self.headers.get("Authorization", ""))
                self._answer(status, data)

            def _answer(self, status: int, data: bytes, retry_after: str = "") -> None:
                self.send_response(status)
                if retry_after:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def forward(self, path: str, body: bytes, auth: str) -> Tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
        try:
            conn.request("POST", path, body=body, headers={"Authorization": auth, "Content-Type": "application/x-ndjson"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def count(self, action: str) -> int:
        with self.lock:
            return self.actions.count(action)

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def free_port_url() -> str:
    """A URL nothing listens on (connection refused)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d" % port


def dummy(annotation: str, name: str) -> object:
    """A valid value for a required argument of a helper, by its annotation."""
    if annotation.startswith("Literal["):
        return annotation[len("Literal[") :].split(",")[0].strip().strip("\"'")
    if annotation == "str":
        return f"{name}-{RUN}"
    if annotation == "int":
        return 1
    if annotation == "float":
        return 0.5
    if annotation == "bool":
        return True
    raise AssertionError(f"no dummy value for {name}: {annotation}")
