"""The outcome of running one Schedule: per-transfer start and finish seconds, the makespan.

The simulator and the emulation both return it, so comparing them is one subtraction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_FIELDS = ("makespan_s", "start_s", "finish_s", "source")


@dataclass(frozen=True)
class Result:
    """Completion of one AllReduce: the makespan and, per transfer id, when it started and
    when it arrived, in seconds from the start of the collective."""

    makespan_s: float
    start_s: dict[int, float]
    finish_s: dict[int, float]
    source: str = "simulator"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (transfer ids become string keys)."""
        return {
            "makespan_s": self.makespan_s,
            "start_s": {str(k): v for k, v in self.start_s.items()},
            "finish_s": {str(k): v for k, v in self.finish_s.items()},
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Result:
        """Inverse of ``to_dict``; ValueError naming the field on a malformed document."""
        if not isinstance(doc, dict):
            raise ValueError("result must be a JSON object")
        for key in doc:
            if key not in _FIELDS:
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
        return cls(makespan_s=_seconds(doc["makespan_s"], "result.makespan_s"),
                   start_s=times["start_s"], finish_s=times["finish_s"], source=doc["source"])

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
