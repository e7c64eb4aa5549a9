"""The chapter's interview questions as drills, and the registry's verdicts on each: `DRILLS` holds each
question's place in the chapter (section, number, the line of the chapter text it sits on, the claims
of its paragraph); `verdicts`, `link` and `to_correct` read the claims and statements registries for
that paragraph; `Answer` is a drill's folded answer as a notebook shows it. The answers themselves,
computed for a scenario, are `interview.answer`.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from inferlab.core.context import yardstick  # @yardstick: sweeps past a model's context on purpose, no warning

SECTIONS = ("15.1.1", "15.1.2", "15.2.1", "15.2.2")


@dataclass(frozen=True)
class Drill:
    """One interview question of the chapter: where it sits and which registry entries judge it."""

    section: str
    number: int          # 1-3, the chapter's order; 3 is the senior follow-up
    title: str
    line: int            # its line in the chapter's text (the statements registry's `line`)
    claims: tuple = ()   # the claims of its paragraph (data/claims.toml)

    @property
    def anchor(self) -> str:
        return f"interview-{self.section.replace('.', '-')}-{self.number}"

    @property
    def id(self) -> str:
        return f"{self.section}-{self.number}"


DRILLS = {d.id: d for d in (
    Drill("15.1.1", 1, "A 10,000-token system prompt and a 4 s TTFT", 57, ("15.1.1-u",)),
    Drill("15.1.1", 2, "Why prefill is compute-bound and decode memory-bound", 59),
    Drill("15.1.1", 3, "Prefill and decode on separate GPU pools", 61),
    Drill("15.1.2", 1, "Why generation is slow", 131, ("15.1.2-aj", "15.1.2-ak")),
    Drill("15.1.2", 2, "What batching buys, and where it stops", 133, ("15.1.2-al",)),
    Drill("15.1.2", 3, "An architectural fix for attention's intensity", 135, ("15.1.2-am",)),
    Drill("15.2.1", 1, "TTFT or ITL: which matters for streaming chat", 199, ("15.2.1-z", "15.2.1-aa")),
    Drill("15.2.1", 2, "A 50,000-token prompt on a 70B model", 201, ("15.2.1-ab",)),
    Drill("15.2.1", 3, "Chunked prefill, the KV cache and the others' tail", 203, ("15.2.1-ac",)),
    Drill("15.2.2", 1, "Maximising the throughput of a busy endpoint", 273),
    Drill("15.2.2", 2, "Tail latency at peak traffic", 275),
    Drill("15.2.2", 3, "The memory budget of Llama-2 70B on two H100s", 277,
          ("15.2.2-ae", "15.2.2-af", "15.2.2-ag", "15.2.2-ah", "15.2.2-ai")),
)}


# What the library cannot answer, one sentence per drill (MoE, MLA and sliding windows are modelled).
NOT_MODELLED = {
    "15.1.2-3": "Not modelled: diffusion language models are outside the library.",
}


STATEMENT_ANCHORS = {"erratum": "statement-errata", "depends": "statements-that-depend-on-the-scenario",
                     "unchecked": "statements-not-checkable-here"}
CLAIM_ANCHORS = {"approximation": "approximations", "unchecked": "not-checkable-from-the-text"}
VERDICT_WORDS = {"erratum": "erratum", "depends": "depends on the setting", "approximation": "approximation",
                 "unchecked": "not checkable", "consistent": "consistent"}


@functools.cache
def _statements(section: str) -> tuple:
    from inferlab.claims.statements import evaluate_statements
    return tuple(evaluate_statements(section=section))


@functools.cache
def _claims(section: str) -> dict:
    from inferlab.claims import evaluate_claims
    return {c.id: c for c in evaluate_claims(section)}


@yardstick
def verdicts(drill: Drill) -> dict:
    """{registry id: verdict} of the question's paragraph: its claims and the statements on its line."""
    out = {cid: _claims(drill.section)[cid].verdict for cid in drill.claims}
    out.update({s.id: s.verdict for s in _statements(drill.section) if s.line == drill.line})
    return out


@yardstick
def link(registry_id: str, drill: Drill) -> str:
    """'[15.1.1-s20](../ERRATA.md#statement-errata) (erratum)': the entry on the errata page."""
    verdict = verdicts(drill)[registry_id]
    if re.fullmatch(r"\d+\.\d+\.\d+-s\d+", registry_id):          # a statement (15.1.1-s20), not a claim
        anchor = STATEMENT_ANCHORS.get(verdict, "statements")
    elif verdict == "erratum":
        from inferlab.claims.render import errata_anchor
        anchor = errata_anchor(registry_id)
    else:
        anchor = CLAIM_ANCHORS.get(verdict, "errata")
    return f"[{registry_id}](../ERRATA.md#{anchor}) ({VERDICT_WORDS[verdict]})"


@yardstick
def to_correct(drill: Drill) -> list[str]:
    """The ids whose verdict says the chapter's answer is wrong or incomplete: errata, approximations
    and statements that depend on the setting."""
    return [i for i, v in verdicts(drill).items() if v in ("erratum", "approximation", "depends")]


@dataclass(frozen=True)
class Answer:
    """A drill's folded answer: Markdown in a <details class="interview-answer"> (a notebook and the
    book fold it alike); text/plain is the same Markdown without the fold (what nbval compares)."""

    drill: Drill
    scenario: str
    strong: tuple             # the chapter's points, with the scenario's numbers (Markdown bullets)
    corrected: tuple = ()     # what the numbers correct, each naming its registry entry
    follow_up: tuple = ()     # (question, answer)
    not_modelled: str = ""
    corrected_heading: str = "Corrected by the numbers"   # "What the numbers add" where nothing is wrong

    def body(self) -> str:
        label = "The senior answer" if self.drill.number == 3 else "The strong answer"
        parts = [f"**{label}**, the chapter's points with the numbers:", "",
                 *[f"- {s}" for s in self.strong]]
        if self.corrected:
            parts += ["", f"**{self.corrected_heading}:**", "", *[f"- {c}" for c in self.corrected]]
        if self.follow_up:
            q, a = self.follow_up
            parts += ["", f"**Follow-up:** *{q}* {a}"]
        if self.not_modelled:
            parts += ["", f"*{self.not_modelled}*"]
        return "\n".join(parts)

    def _repr_markdown_(self) -> str:
        return (f'<details class="interview-answer" data-drill="{self.drill.anchor}">\n'
                f"<summary>Show the answer ({self.drill.section}, question {self.drill.number}), "
                f"numbers for {self.scenario}</summary>\n\n{self.body()}\n\n</details>")

    def __repr__(self) -> str:
        return self.body()


@yardstick
def drill(section: str, number: int) -> Drill:
    """The drill of `section`'s interview question `number` (1-3)."""
    key = f"{section}-{number}"
    if key not in DRILLS:
        raise ValueError(f"no interview question {number!r} in section {section!r}; sections {', '.join(SECTIONS)}, "
                         "questions 1-3")
    return DRILLS[key]


