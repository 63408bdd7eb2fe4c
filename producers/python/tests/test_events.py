"""The helpers of harnessflow.events against the Avro schemas and the gateway.

These tests need the repository's schemas/avro; the Go test also passes the
fields the gateway's JSON form requires (HF_TEST_REQUIRED), from
schemas.ParseJSON itself."""

from __future__ import annotations

import ast
import datetime as dt
import importlib.util
import inspect
import json
import os
import re
import unittest
from pathlib import Path
from typing import Any, Dict, List

import harnessflow
from harnessflow import events

from _live import dummy, expect_delivered, ids, require_live

ROOT = Path(__file__).resolve().parent.parent  # producers/python
SCHEMAS = ROOT.parent.parent / "schemas" / "avro"
ENVELOPE = ("event_id", "event_time", "project", "source")
DERIVED = {"labeled_sample", "round_metrics", "rejected", "checkpoint_published"}


def version_dirs() -> List[Path]:
    return sorted((p for p in SCHEMAS.iterdir() if re.fullmatch(r"v\d+", p.name)), key=lambda p: int(p.name[1:]))


def newest_schema(name: str) -> Path:
    """The newest v<N>/<name>.avsc: each event type is versioned on its own."""
    return [d / f"{name}.avsc" for d in version_dirs() if (d / f"{name}.avsc").is_file()][-1]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_events", ROOT / "tools" / "gen_events.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def expected_annotation(avro: Any) -> str:
    """The annotation a helper must give an Avro type (written independently of the generator)."""
    if isinstance(avro, list):
        (inner,) = [t for t in avro if t != "null"]
        return f"Optional[{expected_annotation(inner)}]"
    if isinstance(avro, dict):
        t = avro["type"]
        if t == "enum":
            return "Literal[" + ", ".join('"%s"' % s for s in avro["symbols"]) + "]"
        if t == "array":
            items = avro["items"]
            if isinstance(items, dict) and items.get("type") == "record":
                return "Sequence[Mapping[str, Any]]"
            return f"Sequence[{expected_annotation(items)}]"
        if t == "long" and avro.get("logicalType") == "timestamp-millis":
            return "Timestamp"
        return expected_annotation(t)
    return {"string": "str", "int": "int", "long": "int", "double": "float", "boolean": "bool"}[avro]


def strip_optional(a: str) -> str:
    """The annotation without Optional[...], its quotes normalized."""
    a = ast.unparse(ast.parse(a, mode="eval"))
    return a[len("Optional["):-1] if a.startswith("Optional[") else a


def required_params(fn) -> List[str]:
    return [n for n, p in inspect.signature(fn).parameters.items() if p.default is inspect.Parameter.empty]


class TestHelpersMatchSchemas(unittest.TestCase):
    def setUp(self) -> None:
        if not SCHEMAS.is_dir():
            self.skipTest(f"no {SCHEMAS}: run from the repository")

    def test_generated_file_is_current(self) -> None:
        want = load_generator().render(SCHEMAS)
        got = (ROOT / "harnessflow" / "events.py").read_text(encoding="utf-8")
        self.assertEqual(got, want, "harnessflow/events.py is stale: run python3 producers/python/tools/gen_events.py")

    def test_every_raw_type_has_a_helper(self) -> None:
        names = sorted({p.stem for d in version_dirs() for p in d.glob("*.avsc")})
        self.assertEqual(sorted(events.TYPES), sorted(n for n in names if n not in DERIVED))
        for name in names:
            self.assertEqual(hasattr(events, name), name not in DERIVED, name)

    def test_parameters_follow_the_schema(self) -> None:
        for name in events.TYPES:
            schema = json.loads(newest_schema(name).read_text(encoding="utf-8"))
            with self.subTest(type=name):
                self.check_record(getattr(events, name), schema, envelope=True)
                for f in schema["fields"]:
                    t = f["type"]
                    if isinstance(t, dict) and t.get("type") == "array" and isinstance(t["items"], dict):
                        rec = t["items"]
                        helper = getattr(events, re.sub(r"(?<!^)(?=[A-Z])", "_", rec["name"]).lower())
                        self.check_record(helper, rec, envelope=False)

    def check_record(self, fn, schema: Dict[str, Any], envelope: bool) -> None:
        params = inspect.signature(fn).parameters
        for p in params.values():
            self.assertEqual(p.kind, inspect.Parameter.KEYWORD_ONLY, p.name)
        fields = [f for f in schema["fields"] if f["name"] not in ENVELOPE]
        names = [n for n in params if n not in ENVELOPE]
        self.assertEqual(names, [f["name"] for f in fields], "fields or their order differ from the schema")
        if envelope:
            self.assertEqual([n for n in params if n in ENVELOPE], list(ENVELOPE))
        for f in fields:
            p = params[f["name"]]
            want = expected_annotation(f["type"])
            self.assertEqual(strip_optional(p.annotation), strip_optional(want), f["name"])
            if p.default is inspect.Parameter.empty:
                continue
            default = f.get("default")
            if "default" in f and default is not None and not isinstance(default, (list, dict)):
                self.assertEqual(p.default, default, f"{f['name']}: the schema's default")
            else:
                self.assertIsNone(p.default, f["name"])
                self.assertTrue(p.annotation.startswith("Optional["), f["name"])

    def test_required_fields_are_the_gateways(self) -> None:
        raw = os.environ.get("HF_TEST_REQUIRED")
        if not raw:
            if os.environ.get("HF_TEST_REQUIRE_LIVE") == "1":
                self.fail("HF_TEST_REQUIRED not set")
            self.skipTest("HF_TEST_REQUIRED not set: run `go test ./producers/python/`")
        want = json.loads(raw)
        for name in events.TYPES:
            self.assertEqual(sorted(required_params(getattr(events, name))), sorted(want[name]), name)
        self.assertEqual(sorted(required_params(events.artifact)), sorted(want["Artifact"]))

    def test_only_needed_fields_are_sent(self) -> None:
        ev = events.campaign_declared(campaign_id="c")
        self.assertEqual(ev, {"type": "campaign_declared", "campaign_id": "c", "label_epsilon": 0.02, "label_alpha": 0.05})
        ev = events.cell_started(campaign_id="c", cell_id="x", benchmark="b", agent_model="a", route="baseline",
                                 evolver_model=None, seed=0)
        self.assertNotIn("evolver_model", ev)  # null is the schema's default
        self.assertEqual(ev["seed"], 0)

    def test_enums_checked(self) -> None:
        with self.assertRaisesRegex(ValueError, "status: 'done' is not one of ok, error"):
            events.task_attempt(cell_id="c", task_id="t", attempt=1, status="done", score=1.0, success=True)  # type: ignore[arg-type]
        with self.assertRaisesRegex(ValueError, "kind"):
            events.artifact(kind="script", name="n", op="add")  # type: ignore[arg-type]

    def test_timestamps(self) -> None:
        t = dt.datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)
        self.assertEqual(events.cell_finished(cell_id="c", status="failed", event_time=t)["event_time"], "2026-05-01T12:00:00.123Z")
        naive = dt.datetime(2026, 5, 1, 12, 0, 0)
        self.assertEqual(events.cell_finished(cell_id="c", status="failed", event_time=naive)["event_time"], "2026-05-01T12:00:00.000Z")
        self.assertEqual(events.cell_finished(cell_id="c", status="failed", event_time=5)["event_time"], 5)
        with self.assertRaises(TypeError):
            events.cell_finished(cell_id="c", status="failed", event_time=1.5)  # type: ignore[arg-type]

    def test_sources_parse_as_python39(self) -> None:
        for path in sorted((ROOT / "harnessflow").glob("*.py")) + sorted((ROOT / "tests").glob("*.py")):
            with self.subTest(path=path.name):
                ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 9))


class TestHelpersLive(unittest.TestCase):
    def test_minimal_events_accepted(self) -> None:
        """Every helper called with its required arguments only gives an event the gateway takes."""
        url, token, _ = require_live(self)
        eids = ids("minimal", len(events.TYPES))
        with harnessflow.Client(url, token=token) as c:
            for eid, name in zip(eids, events.TYPES):
                fn = getattr(events, name)
                params = inspect.signature(fn).parameters
                args = {n: dummy(str(params[n].annotation), n) for n in required_params(fn)}
                c.emit(fn(event_id=eid, **args))
        self.assertEqual(c.stats().delivered, len(eids))
        expect_delivered(eids)

    def test_harness_update_with_artifacts(self) -> None:
        url, token, _ = require_live(self)
        eids = ids("update", 1)
        content = "---\nname: bisect\ndescription: find the bad commit\n---\nUse git bisect.\n"
        import hashlib

        ev = events.harness_update(
            event_id=eids[0], cell_id="py-cell", update_id="u1", cycle=1, from_version="h0", to_version="h1",
            evolver_model="evolver-x", evidence_task_ids=["t1"], evidence_summary="failed twice", accepted=True,
            rolled_back=False, artifacts=[events.artifact(kind="skill", name="bisect", op="add", content=content,
                                                          content_sha256=hashlib.sha256(content.encode()).hexdigest())],
        )
        with harnessflow.Client(url, token=token) as c:
            c.emit(ev)
        expect_delivered(eids)


if __name__ == "__main__":
    unittest.main()
