"""The outcome of running one Schedule: per-transfer start and finish seconds, the makespan.

The simulator and the emulation both return it, so comparing them is one subtraction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_FIELDS = ("makespan_s", "start_s", "finish_s", "source")
#: Fields a document may leave out (older documents have none of them).
_OPTIONAL = ("rerouted",)


@dataclass(frozen=True)
class Result:
    """Completion of one AllReduce: the makespan and, per transfer id, when it started and
    when it arrived, in seconds from the start of the collective; ``rerouted`` lists, in
    increasing order, the ids of the transfers that left their scheduled path for a backup
    path around a failed link."""

    makespan_s: float
    start_s: dict[int, float]
    finish_s: dict[int, float]
    source: str = "simulator"
    rerouted: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (transfer ids become string keys); ``rerouted`` appears only
        when not empty, so a run without failures gives the same document as before."""
        doc = {
            "makespan_s": self.makespan_s,
            "start_s": {str(k): v for k, v in self.start_s.items()},
            "finish_s": {str(k): v for k, v in self.finish_s.items()},
            "source": self.source,
        }
        if self.rerouted:
            doc["rerouted"] = list(self.rerouted)
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Result:
        """Inverse of ``to_dict``; ValueError naming the field on a malformed document."""
        if not isinstance(doc, dict):
            raise ValueError("result must be a JSON object")
        for key in doc:
            if key not in _FIELDS and key not in _OPTIONAL:
                raise ValueError(f"result has an unknown field {key!r}")
        for key in _FIELDS:
            if key not in doc:
                raise ValueError(f"result is missing the field {key!r}")
        if not isinstance(doc["source"], str):
            raise ValueError(f"result.source must be a str, got {doc['source']!r}")
        times = {}
        for key in ("start_s", "finish_s"):
            table = doc[key]
            if not isinstance(table, dict):
                raise ValueError(f"result.{key} must be an object")
            try:
                times[key] = {int(k): _seconds(v, f"result.{key}[{k}]")
                              for k, v in table.items()}
            except (TypeError, ValueError) as exc:
                if "result." in str(exc):
                    raise
                raise ValueError(f"result.{key} has a key that is not a transfer id") \
                    from None
        rerouted = doc.get("rerouted", [])
        if not isinstance(rerouted, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in rerouted):
            raise ValueError(f"result.rerouted must be a list of transfer ids, got {rerouted!r}")
        return cls(makespan_s=_seconds(doc["makespan_s"], "result.makespan_s"),
                   start_s=times["start_s"], finish_s=times["finish_s"], source=doc["source"],
                   rerouted=tuple(rerouted))

    def to_json(self) -> str:
        """Serialise to JSON; ``Result.from_json(r.to_json()) == r``."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> Result:
        """Parse JSON made by ``to_json``."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"result is not valid JSON: {exc}") from None
        return cls.from_dict(doc)


def _seconds(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} must be a number, got {value!r}")
    return float(value)
