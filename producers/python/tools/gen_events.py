#!/usr/bin/env python3
"""Generate harnessflow/events.py from the Avro schemas (schemas/avro/v<N>/*.avsc).

Usage, from the repository root or anywhere:

    python3 producers/python/tools/gen_events.py            # rewrite events.py
    python3 producers/python/tools/gen_events.py --check    # exit 1 if it is stale

The field names, their order, the Python types, the enum symbols, the defaults
and the docs come from the newest schema version. What the Avro schemas do not
say is which fields the JSON form requires (ParseJSON fills most others with
zero): that is JSON_REQUIRED below, and the Go test of this folder checks it
against schemas.ParseJSON, so neither side can drift unnoticed. The tests
(tests/test_events.py) also fail when events.py differs from render().
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "harnessflow"
OUTPUT = PACKAGE / "events.py"
DEFAULT_SCHEMAS = HERE.parents[2] / "schemas" / "avro"

# The raw event types: what agents send. The derived ones (labeled_sample,
# round_metrics, rejected, checkpoint_published) are written by the pipeline.
RAW_TYPES = (
    "campaign_declared",
    "cell_started",
    "task_attempt",
    "skill_event",
    "harness_update",
    "adherence_judgment",
    "cell_finished",
)

# Fields the JSON form requires (schemas.ParseJSON answers "missing required
# field" without them); nested records are keyed by record name.
JSON_REQUIRED: Dict[str, Tuple[str, ...]] = {
    "campaign_declared": ("campaign_id",),
    "cell_started": ("campaign_id", "cell_id", "benchmark", "agent_model", "route"),
    "task_attempt": ("cell_id", "task_id", "attempt", "status", "score", "success"),
    "skill_event": ("cell_id", "task_id", "attempt", "turn", "tool", "status"),
    "harness_update": ("cell_id", "update_id", "from_version", "to_version"),
    "adherence_judgment": ("cell_id", "task_id", "attempt", "skill_name", "judge_model"),
    "cell_finished": ("cell_id", "status"),
    "Artifact": ("kind", "name", "op"),
}

# Booleans the JSON form makes true when they are absent (schemas.ParseJSON;
# every other absent boolean is false): task_attempt.final, the task's last
# attempt, as on the gateway's OTLP receiver.
JSON_TRUE_WHEN_ABSENT: Dict[str, Tuple[str, ...]] = {
    "task_attempt": ("final",),
}

ENVELOPE = ("event_id", "event_time", "project", "source")

PRIMITIVES = {
    "string": "str",
    "int": "int",
    "long": "int",
    "double": "float",
    "float": "float",
    "boolean": "bool",
    "bytes": "str",
}


def newest_schema(schema_root: Path, name: str) -> Path:
    """Return the newest schemas/avro/v<N>/<name>.avsc (each type is versioned on its own)."""
    found = [
        p / (name + ".avsc")
        for p in schema_root.iterdir()
        if p.is_dir() and re.fullmatch(r"v\d+", p.name) and (p / (name + ".avsc")).is_file()
    ]
    if not found:
        raise SystemExit(f"gen_events: no v<N>/{name}.avsc under {schema_root}")
    return max(found, key=lambda p: int(p.parent.name[1:]))


def load(schema_root: Path) -> Dict[str, Tuple[Dict[str, Any], str]]:
    """Load the newest .avsc of each raw type: name -> (schema, its v<N> folder name)."""
    out = {}
    for name in RAW_TYPES:
        path = newest_schema(schema_root, name)
        with open(path, encoding="utf-8") as f:
            out[name] = (json.load(f), path.parent.name)
    return out


def py_type(avro: Any, field: str) -> str:
    """The Python annotation of an Avro type (as a string)."""
    if isinstance(avro, str):
        if avro in PRIMITIVES:
            return PRIMITIVES[avro]
        raise SystemExit(f"gen_events: {field}: unsupported Avro type {avro!r}")
    if isinstance(avro, list):
        rest = [t for t in avro if t != "null"]
        if len(rest) != 1 or len(avro) != 2:
            raise SystemExit(f"gen_events: {field}: unsupported union {avro!r}")
        return "Optional[" + py_type(rest[0], field) + "]"
    kind = avro.get("type")
    if kind == "enum":
        return "Literal[" + ", ".join(json.dumps(s) for s in avro["symbols"]) + "]"
    if kind == "array":
        items = avro["items"]
        if isinstance(items, dict) and items.get("type") == "record":
            return "Sequence[Mapping[str, Any]]"
        return "Sequence[" + py_type(items, field) + "]"
    if kind == "map":
        return "Mapping[str, " + py_type(avro["values"], field) + "]"
    if kind == "long" and avro.get("logicalType") == "timestamp-millis":
        return "Timestamp"
    if kind in PRIMITIVES:
        return PRIMITIVES[kind]
    raise SystemExit(f"gen_events: {field}: unsupported Avro type {avro!r}")


def enum_of(avro: Any) -> Optional[Dict[str, Any]]:
    if isinstance(avro, dict) and avro.get("type") == "enum":
        return avro
    return None


def records_of(avro: Any) -> List[Dict[str, Any]]:
    """Nested record definitions (array items) inside a field type."""
    if isinstance(avro, dict):
        if avro.get("type") == "record":
            return [avro]
        if avro.get("type") == "array":
            return records_of(avro["items"])
    return []


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Param:
    """One keyword argument of a helper."""

    def __init__(self, name: str, avro: Any, required: bool, has_default: bool, default: Any):
        self.name = name
        self.avro = avro
        self.required = required
        self.enum = enum_of(avro)
        base = py_type(avro, name)
        # A scalar Avro default (not null, not [] / {}) is the Python default
        # and always sent; every other optional argument defaults to None and
        # is left out, so the gateway applies the schema's default.
        self.scalar_default = has_default and not isinstance(default, (list, dict)) and default is not None
        if required:
            self.annotation, self.default = base, None
        elif self.scalar_default:
            self.annotation, self.default = base, repr(default)
        else:
            if not base.startswith("Optional["):
                base = "Optional[" + base + "]"
            self.annotation, self.default = base, "None"

    def signature(self) -> str:
        if self.default is None:
            return f"    {self.name}: {self.annotation},"
        return f"    {self.name}: {self.annotation} = {self.default},"

    def body(self) -> str:
        if self.enum is not None:
            const = enum_const(self.enum)
            if self.required:
                return f'    ev["{self.name}"] = _enum("{self.name}", {self.name}, {const})'
            return f'    _put(ev, "{self.name}", None if {self.name} is None else _enum("{self.name}", {self.name}, {const}))'
        conv = self.name
        if self.annotation.endswith("Timestamp]") or self.annotation == "Timestamp":
            conv = f"_timestamp({self.name})"
        elif "Sequence[" in self.annotation:
            conv = f"_list({self.name})"
        elif "Mapping[" in self.annotation:
            conv = f"_dict({self.name})"
        if self.required or self.scalar_default:
            return f'    ev["{self.name}"] = {conv}'
        return f'    _put(ev, "{self.name}", {conv})'


def enum_const(enum: Dict[str, Any]) -> str:
    return snake(enum["name"]).upper() + "_SYMBOLS"


def wrap(text: str, indent: str, width: int = 88) -> List[str]:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(indent) + len(line) + 1 + len(w) > width:
            lines.append(indent + line)
            line = w
        else:
            line = (line + " " + w) if line else w
    if line:
        lines.append(indent + line)
    return lines


def helper(name: str, record: Dict[str, Any], required: Tuple[str, ...], where: str, envelope: bool) -> List[str]:
    fields = [f for f in record["fields"] if f["name"] not in ENVELOPE]
    params = [Param(f["name"], f["type"], f["name"] in required, "default" in f, f.get("default")) for f in fields]
    known = {p.name for p in params}
    for r in required:
        if r not in known:
            raise SystemExit(f"gen_events: JSON_REQUIRED names {name}.{r}, which the schema does not have")
    out = [f"def {name}(", "    *,"]
    out += [p.signature() for p in params]
    if envelope:
        out += [
            "    event_id: Optional[str] = None,",
            "    event_time: Optional[Timestamp] = None,",
            "    project: Optional[str] = None,",
            "    source: Optional[str] = None,",
        ]
    out.append(") -> Dict[str, Any]:")
    doc = record.get("doc", "")
    out.append(f'    """{name}: {doc}'.rstrip())
    out.append("")
    out += wrap(f"Avro record {record.get('namespace', 'dev.harnessflow')}.{record['name']} ({where}).", "    ")
    out += wrap("Required: " + ", ".join(required) + ".", "    ")
    enums = [p for p in params if p.enum is not None]
    for p in enums:
        out += wrap(f"{p.name} is one of: " + ", ".join(p.enum["symbols"]) + ".", "    ")
    optional = [p.name for p in params if not p.required and not p.scalar_default]
    if optional:
        true_ones = [n for n in JSON_TRUE_WHEN_ABSENT.get(name, ()) if n in optional]
        otherwise = "; " + ", ".join(true_ones) + ": true" if true_ones else ""
        out += wrap(
            "Left at None, " + ", ".join(optional) + " are left out and the gateway applies the "
            "schema's default (null for nullable fields, [] for arrays, zero or \"\" otherwise"
            + otherwise + ").",
            "    ",
        )
    if envelope:
        out += wrap(
            "Envelope: event_id is derived by the gateway when None; event_time (epoch "
            "milliseconds, RFC 3339 text or a datetime) is set by Client.emit when None; "
            "project defaults to the token's, source to the client's.",
            "    ",
        )
    out.append('    """')
    out.append(f'    ev: Dict[str, Any] = {{"type": "{name}"}}' if envelope else "    ev: Dict[str, Any] = {}")
    if envelope:
        out += [
            '    _put(ev, "event_id", event_id)',
            '    _put(ev, "event_time", _timestamp(event_time))',
            '    _put(ev, "project", project)',
            '    _put(ev, "source", source)',
        ]
    out += [p.body() for p in params]
    out.append("    return ev")
    return out


PRELUDE = '''\
# Code generated by producers/python/tools/gen_events.py from schemas/avro/{version}; DO NOT EDIT.
# Regenerate: python3 producers/python/tools/gen_events.py

"""Typed helpers, one per raw event type, that return the event as a dict for Client.emit.

Every argument is keyword-only and named as in the Avro schema; the required
ones are what the gateway requires. Enum arguments are checked here (ValueError);
every other rule is checked by the gateway, whose 400 names the field.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Union

#: The schema version the helpers were generated from.
SCHEMA_VERSION = {number}

#: A timestamp: epoch milliseconds, RFC 3339 text, or a datetime (naive means UTC).
Timestamp = Union[int, str, _dt.datetime]

#: The event types these helpers build, in the order of docs/design.md §3.
TYPES = {types}


def _put(ev: Dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        ev[key] = value


def _enum(field: str, value: Any, symbols: Sequence[str]) -> str:
    if value not in symbols:
        raise ValueError(f"{{field}}: {{value!r}} is not one of {{', '.join(symbols)}}")
    return value


def _list(value: Optional[Sequence[Any]]) -> Optional[List[Any]]:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(f"want a sequence, got {{type(value).__name__}}")
    return list(value)


def _dict(value: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    return None if value is None else dict(value)


def _timestamp(value: Optional[Timestamp]) -> Union[None, int, str]:
    """Epoch milliseconds or RFC 3339 text, as the JSON form takes them."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        value = value.astimezone(_dt.timezone.utc)
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{{value.microsecond // 1000:03d}}Z"
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"timestamp: want epoch milliseconds (int), RFC 3339 text or a datetime, got {{type(value).__name__}}")
'''


def render(schema_root: Path = DEFAULT_SCHEMAS) -> str:
    """Return the text of events.py for the newest version of each raw type under schema_root."""
    loaded = load(schema_root)
    records = {name: rec for name, (rec, _) in loaded.items()}
    origin = {name: f"schemas/avro/{v}/{name}.avsc" for name, (_, v) in loaded.items()}
    newest = max((v for _, v in loaded.values()), key=lambda v: int(v[1:]))
    out = PRELUDE.format(version=newest, number=newest[1:], types=repr(RAW_TYPES)).splitlines()
    # Enum symbol tuples, each once, in order of appearance.
    enums: Dict[str, Dict[str, Any]] = {}
    nested: Dict[str, Tuple[Dict[str, Any], str]] = {}

    def collect(rec: Dict[str, Any], where: str, path: str) -> None:
        for f in rec["fields"]:
            e = enum_of(f["type"])
            if e is not None and e["name"] not in enums:
                enums[e["name"]] = e
            for sub in records_of(f["type"]):
                if sub["name"] not in nested:
                    sub = dict(sub, doc=sub.get("doc") or f"One element of {path}.{f['name']}.")
                    nested[sub["name"]] = (sub, where)
                collect(sub, where, f"{path}.{f['name']}[]")

    for name in RAW_TYPES:
        collect(records[name], origin[name], name)
    out.append("")
    for e in enums.values():
        out.append("")
        out.append(f"#: Symbols of the Avro enum {e['name']}.")
        out.append(f"{enum_const(e)} = {tuple(e['symbols'])!r}")
    for rec_name, (rec, where) in nested.items():
        req = JSON_REQUIRED.get(rec_name)
        if req is None:
            raise SystemExit(f"gen_events: JSON_REQUIRED has no entry for the nested record {rec_name}")
        out += ["", ""]
        out += helper(snake(rec_name), rec, req, where, envelope=False)
    for name in RAW_TYPES:
        out += ["", ""]
        out += helper(name, records[name], JSON_REQUIRED[name], origin[name], envelope=True)
    return "\n".join(out) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=Path, default=DEFAULT_SCHEMAS, help="the schemas/avro folder")
    ap.add_argument("--out", type=Path, default=OUTPUT, help="the file to write")
    ap.add_argument("--check", action="store_true", help="exit 1 if --out differs from what would be written")
    args = ap.parse_args(argv)
    text = render(args.schemas)
    if args.check:
        try:
            current = args.out.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = ""
        if current != text:
            print(f"{args.out} is stale: run python3 producers/python/tools/gen_events.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
