"""The advice as a document: what `advise` says (Advice), its JSON
(pgparmon.advice/1), and the reasoning lines and confidence every kind of
advice (dump, restore, COPY load, a subscription's sync) words the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import units as fmt
from ..redact import redact_text
from . import predict
from .checks import Caution
from .inventory import Inventory
from .predict import Evidence, Prediction
from .request import Request

SCHEMA = "pgparmon.advice/1"


@dataclass
class Advice:
    kind: str
    recommended: int
    fastest: int
    predictions: list[Prediction]
    lower_bound_s: float | None
    basis: str
    confidence: str
    warnings: list[Caution]
    command: str
    evidence: Evidence
    choice: predict.Choice
    inventory: Inventory | None
    dominant: dict[str, Any] | None
    probe: dict[str, Any] | None = None
    why: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    server: dict[str, Any] | None = None
    copy: dict[str, Any] | None = None  # kind "copy": the file and the table
    subscription: dict[str, Any] | None = None  # kind "subscription": its tables and sides
    # the settings to change, as commands (pgparmon.advice/1 `settings`)
    settings: list[dict[str, Any]] = field(default_factory=list)

    def prediction(self, j: int) -> Prediction | None:
        return next((p for p in self.predictions if p.jobs == j), None)

    def to_json(self) -> dict[str, Any]:
        rec = self.prediction(self.recommended)
        return {
            "schema": SCHEMA,
            "kind": self.kind,
            "recommended_jobs": self.recommended,
            "fastest_jobs": self.fastest,
            "knee_jobs": self.choice.knee,
            "efficient_jobs": self.choice.efficient,
            "capped_by": self.choice.capped_by,
            "predicted_wall_s": round(rec.wall_s, 2) if rec else None,
            "predictions": [p.to_json() for p in self.predictions],
            "lower_bound_s": None if self.lower_bound_s is None else round(self.lower_bound_s, 2),
            "dominant": self.dominant,
            "basis": self.basis,
            "confidence": self.confidence,
            "fit": fit_json(self.evidence),
            "evidence_note": self.evidence.note,
            "probe": _redacted_probe(self.probe),
            "inventory": self.inventory.to_json() if self.inventory else None,
            "server": self.server,
            "copy": None if self.copy is None else {
                k: (redact_text(v) if k == "file" else v) for k, v in self.copy.items()},
            "subscription": self.subscription,
            "settings": [{**c, "command": redact_text(c["command"])} for c in self.settings],
            "warnings": [w.to_json() for w in self.warnings],
            "why": [redact_text(s) for s in self.why],
            "notes": [redact_text(s) for s in self.notes],
            "command": redact_text(self.command),
        }


def fit_json(ev: Evidence) -> dict[str, Any]:
    """The fit, with the resource bounds it is held under (`ceilings`) and
    whether it is followed past its range up to them (`past_range`: then
    `valid_up_to_jobs` is null, the ceilings decide)."""
    out = {**ev.fit.to_json(), "ceilings": [c.to_json() for c in ev.ceilings],
           "past_range": ev.extend}
    if ev.extend:
        out["valid_up_to_jobs"] = None
    return out


def _redacted_probe(probe: dict[str, Any] | None) -> dict[str, Any] | None:
    """The probe's notes quote psql's errors: through the redactor, like
    every other message."""
    if probe is None:
        return None
    return {**probe, "notes": [redact_text(str(n)) for n in probe.get("notes") or []]}


def confidence(ev: Evidence) -> str:
    if ev.basis == "static":
        return "low"
    good = ev.fit.rms_rel <= 0.05
    if ev.fit.n_points < 2:
        return "low"
    if ev.basis == "probe":
        return "high" if good and ev.fit.n_points >= 3 else "medium"
    if ev.basis in ("history", "timings"):
        return "medium" if good and ev.fit.n_points >= 3 else "low"
    return "low"


def why_lines(ev: Evidence, choice: predict.Choice, preds: list[Prediction],
         dom: dict[str, Any] | None) -> list[str]:
    by = {p.jobs: p for p in preds}
    fast = by[choice.fastest]
    out = [f"fastest predicted: -j {choice.fastest} ({fmt.duration(fast.wall_s)})"]
    if choice.knee != choice.fastest:
        k = by[choice.knee]
        out.append(f"-j {choice.knee} is within {100 * (predict.KNEE - 1):.0f}% of that "
                   f"({fmt.duration(k.wall_s)}): more jobs buy little")
    if choice.efficient is not None and choice.efficient < choice.knee:
        out.append(f"beyond -j {choice.efficient} the CPU per GB grows more than "
                   f"{100 * (predict.EFFICIENCY - 1):.0f}% and faster than the run speeds up: "
                   "the extra jobs mostly burn CPU")
    rec = by[choice.recommended]
    if rec.extrapolated:
        top = ev.fit.max_n
        gain = ev.throughput(top) / ev.throughput(max(1.0, top / 2)) - 1 if top >= 2 else 0.0
        ceil = ev.binding(choice.recommended) or next(iter(ev.ceilings), None)
        out.append(f"-j {choice.recommended} rests on extrapolation past the largest count "
                   f"measured ({top:g}): the curve still gained {100 * gain:.0f}% a doubling "
                   "there; followed up to "
                   + (f"{ceil.name} ({ceil.detail})" if ceil else "the host's limits"))
    for why in choice.capped_by:
        out.append(f"capped by {why}")
    if dom:
        out.append(f"one table sets the wall time: {dom['item']}")
    return out


def conn_args(req: Request) -> list[str]:
    """-h -p -U as the user gave them, for a ready-to-run command line."""
    out: list[str] = []
    if req.host:
        out += ["-h", req.host]
    if req.port:
        out += ["-p", str(req.port)]
    if req.user:
        out += ["-U", req.user]
    return out
