#!/usr/bin/env python3
"""Tenant attacks on a running `harnessflow up`, with its resident memory.

Sends, with the project's ingest token from endpoints.json, what issue 35
measured: (1) 3000 `cell_started` with task_count 2^31-1, each a new cell
that never finishes; (2) gzip OTLP bodies that inflate to 8 MiB of empty
spans, four at once. Before, between and after, it reads the up process's
resident memory (VmRSS) from /proc and, during each attack, its peak by
sampling every 20 ms. Standard library only.

    harnessflow up --demo &            # clean traffic first
    python3 bench/tenant/attack.py --pid $! --data-dir .harnessflow
"""
import argparse
import gzip
import json
import threading
import time
import urllib.error
import urllib.request


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class Peak:
    """Samples a process's resident memory until stopped."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, rss_kb(pid), threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, rss_kb(self.pid))
            except (OSError, RuntimeError):
                return
            time.sleep(0.02)

    def done(self):
        self.stop.set()
        self.t.join()
        return self.peak


def post(url, token, body, ctype, gz=False):
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Authorization", "Bearer " + token)
    req.add_header("Content-Type", ctype)
    if gz:
        req.add_header("Content-Encoding", "gzip")
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            code, text = r.status, r.read()[:160]
    except urllib.error.HTTPError as e:
        code, text = e.code, e.read()[:160]
    return code, time.monotonic() - t0, text.decode("utf-8", "replace")


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def empty_spans_body(n):
    """ExportTraceServiceRequest{resource_spans: [{scope_spans: [{spans: n × {}}]}]}."""
    spans = b"\x12\x00" * n  # ScopeSpans.spans (field 2), empty messages
    scope = b"\x12" + varint(len(spans)) + spans  # ResourceSpans.scope_spans (field 2)
    return b"\x0a" + varint(len(scope)) + scope  # request.resource_spans (field 1)


def settle(pid, seconds):
    time.sleep(seconds)
    return rss_kb(pid)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pid", type=int, required=True, help="pid of harnessflow up")
    ap.add_argument("--data-dir", default=".harnessflow", help="up's --data-dir (endpoints.json)")
    ap.add_argument("--cells", type=int, default=3000, help="never-finishing cells to open")
    ap.add_argument("--otlp-spans", type=int, default=4_190_000, help="empty spans per OTLP body (2 bytes each; the default inflates to just under the gateway's 8 MiB body cap)")
    ap.add_argument("--otlp-parallel", type=int, default=4, help="OTLP bodies sent at once")
    args = ap.parse_args()
    with open(f"{args.data_dir}/endpoints.json") as f:
        ep = json.load(f)
    events_url, token = ep["ingest_url"], ep["ingest_token"]
    traces_url = events_url.rsplit("/v1/", 1)[0] + "/v1/traces"
    mb = lambda kb: f"{kb / 1024:.0f} MB"
    out = {}

    out["clean_rss_kb"] = rss_kb(args.pid)
    print(f"up resident after clean traffic: {mb(out['clean_rss_kb'])}")

    evs = [{"type": "cell_started", "campaign_id": "attack", "cell_id": f"attack/c{i}", "benchmark": "swe",
            "agent_model": "a", "evolver_model": None, "seed": 1, "route": "baseline", "h0_version": "evo-0",
            "batch_size": 5, "max_attempts": 1, "task_count": 2147483647} for i in range(args.cells)]
    body = "\n".join(json.dumps(e) for e in evs).encode()
    p = Peak(args.pid)
    code, took, text = post(events_url, token, body, "application/x-ndjson")
    after = settle(args.pid, 10)
    out["cells"] = {"request_bytes": len(body), "status": code, "seconds": round(took, 3),
                    "peak_rss_kb": p.done(), "rss_after_10s_kb": after}
    print(f"cell attack: {args.cells} cell_started ({len(body) / 1e6:.2f} MB) -> {code} in {took:.2f}s; "
          f"peak {mb(out['cells']['peak_rss_kb'])}, 10 s later {mb(after)}")

    raw = empty_spans_body(args.otlp_spans)
    gz = gzip.compress(raw, 9)
    p = Peak(args.pid)
    results = [None] * args.otlp_parallel

    def one(i):
        results[i] = post(traces_url, token, gz, "application/x-protobuf", gz=True)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(args.otlp_parallel)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out["otlp"] = {"inflated_bytes": len(raw), "gzip_bytes": len(gz), "parallel": args.otlp_parallel,
                   "answers": [[c, round(s, 3), x] for c, s, x in results], "peak_rss_kb": p.done(),
                   "rss_after_kb": rss_kb(args.pid)}
    print(f"OTLP attack: {args.otlp_parallel} × {len(gz)} B gzip ({len(raw) / 2**20:.0f} MiB of empty spans) -> "
          f"{[(c, round(s, 3)) for c, s, _ in results]}; peak {mb(out['otlp']['peak_rss_kb'])}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
