"""Regenerate the outputs README.md (and docs/cli.md) show, so that none is typed by hand.

Two kinds of generated text:
- a ```console block: each `$ .venv/bin/inferlab ARGS` (or `$ .venv/bin/python SCRIPT ARGS`) line is
  followed by what that command prints, run with this interpreter and the library from lib/;
- a region between `<!-- generated: NAME -->` and `<!-- end generated -->`: the output of REGIONS[NAME].

    python tools/readme_outputs.py           # exit 1 and a diff when a page is stale
    python tools/readme_outputs.py --write   # rewrite the pages in place and redraw the figure (make readme)

tests/test_readme.py runs the check.
"""
from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The pages whose outputs are generated: the front page and the command-line reference.
PAGES = (README, ROOT / "docs" / "cli.md", ROOT / "docs" / "vllm.md", ROOT / "docs" / "kernels.md")
PROMPT = "$ "
REGION = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)
CONSOLE = re.compile(r"(```console\n)(?P<body>.*?)(```)", re.S)


COMMANDS = {".venv/bin/inferlab": ["-m", "inferlab"], ".venv/bin/python": []}


def run(words: list[str]) -> str:
    """What a README command prints on stdout (`.venv/bin/inferlab ARGS` or `.venv/bin/python SCRIPT ARGS`,
    run with this interpreter and the library from lib/); a command that fails is an error, not an output."""
    if not words or words[0] not in COMMANDS:
        raise ValueError(f"README console lines run one of {sorted(COMMANDS)}; got {' '.join(words)!r}")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "COLUMNS": "100", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, *COMMANDS[words[0]], *words[1:]], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(words)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def inferlab(args: list[str]) -> str:
    return run([".venv/bin/inferlab", *args])


def console(body: str) -> str:
    """A console block with every command's output replaced by what the command prints now."""
    out = []
    for line in body.splitlines():
        if line.startswith(PROMPT):
            out.append(line)
            out.extend(run(shlex.split(line[len(PROMPT):])).rstrip("\n").splitlines())
    return "\n".join(out) + "\n"


def verdict_counts() -> str:
    """Per subsection, the verdicts of the chapter's numbers and of its statements (`inferlab verify`)."""
    from inferlab.claims.registry import SECTIONS, VERDICTS
    from inferlab.claims.statements import STATEMENT_VERDICTS
    numbers = json.loads(inferlab(["verify", "--json"]))["claims"]
    statements = json.loads(inferlab(["verify", "--kind", "statement", "--json"]))["statements"]
    head = ("| section | numbers: " + " / ".join(VERDICTS) + " | statements: " + " / ".join(STATEMENT_VERDICTS) + " |")
    lines = [head, "|---|---|---|"]

    def counts(rows, verdicts, section=None):
        return " / ".join(str(sum(1 for r in rows if r["verdict"] == v and section in (None, r["section"])))
                          for v in verdicts)
    for s in SECTIONS:
        lines.append(f"| {s} | {counts(numbers, VERDICTS, s)} | {counts(statements, STATEMENT_VERDICTS, s)} |")
    lines.append(f"| all ({len(numbers)} numbers, {len(statements)} statements) | "
                 f"{counts(numbers, VERDICTS)} | {counts(statements, STATEMENT_VERDICTS)} |")
    return "\n".join(lines) + "\n"


# The practice claims the front page shows (all of them: `inferlab verify`, after its table).
FRONT_PAGE_PRACTICE = ("15.1.1-n", "15.2.1-v", "15.1.2-ah", "15.2.2-al")


def practice_measured() -> str:
    """The chapter's practice numbers against the ideal roofline and the measured H100 kernels
    (`inferlab verify --json`'s practice_measured), for FRONT_PAGE_PRACTICE."""
    rows = {r["id"]: r for r in json.loads(inferlab(["verify", "--json"]))["practice_measured"]}
    lines = ["| the book says | ideal roofline | measured kernels | + a scheduler's step time |", "|---|---|---|---|"]
    for cid in FRONT_PAGE_PRACTICE:
        r = rows[cid]
        cells = [f"{r[k]['display']} {r['unit']} ({r[k]['verdict']})" for k in ("ideal", "measured", "overhead")]
        lines.append(f"| {r['description']}: {r['book']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def simulator_vs_transformers() -> str:
    """The judged prediction's rows of the recorded transformers repeats (validate.repeats_markdown)."""
    from inferlab.study import validate
    lines = validate.repeats_markdown(validate.recorded(engine="transformers")).splitlines()
    return "\n".join(lines[:2] + [line for line in lines[2:] if "(judged)" in line]) + "\n"


VLLM_RECORDS = ROOT / "data" / "measurements" / "serving" / "vllm"


def _vllm_table(folder) -> str:
    from inferlab.study.engines.vllm import runs_markdown
    records = [json.loads(p.read_text(encoding="utf-8")) for p in Path(folder).glob("*.json")]
    return runs_markdown(sorted(records, key=lambda r: r["created"])) + "\n"


def vllm_development() -> str:
    """The two development runs against vLLM (engines.vllm_report.runs_markdown), in the order they were made."""
    return _vllm_table(VLLM_RECORDS / "development")


def vllm_shared_host() -> str:
    """The three repeats of 2026-12-04 against vLLM, on a host shared with niced jobs."""
    return _vllm_table(VLLM_RECORDS / "shared-host-2026-12-04")


VLLM_STEPLOG = VLLM_RECORDS / "steplog-2026-12-05"
VLLM_RENICED = VLLM_RECORDS / "reniced-2026-12-05"


def _vllm_records(folder) -> list:
    return sorted((json.loads(p.read_text(encoding="utf-8")) for p in Path(folder).glob("*.json")),
                  key=lambda r: r["created"])


def vllm_reniced() -> str:
    """The three repeats with vLLM's engine core reniced and the front end's delays sampled."""
    return _vllm_table(VLLM_RENICED)


def vllm_reniced_respread() -> str:
    """The reniced repeats re-predicted from their records with the steps' spread drawn from each
    calibration's Poisson runs only (validate.vllm_repredict), counted as runs_markdown counts."""
    from inferlab.study import validate
    pairs = within = 0
    for rec in _vllm_records(VLLM_RENICED):
        for got in validate.vllm_repredict(rec, "poisson"):
            if got["bounded"]:
                pairs += 1
                within += got["comparison"]["within_bounds"]
    return (f"Re-predicted from the same three records with the spread drawn from the Poisson runs only: "
            f"{within} of {pairs} bounded (run, rate) pairs within all four bounds.\n")


VLLM_HELD_OUT = VLLM_RECORDS / "poisson-spread-2026-12-05"


def vllm_held_out() -> str:
    """The three held-out repeats of the current method (engine core reniced, front end sampled, spread
    from the calibrations' Poisson runs)."""
    return _vllm_table(VLLM_HELD_OUT)


def vllm_held_out_pieces() -> str:
    from inferlab.study.engines.vllm import pieces_markdown
    return pieces_markdown(_vllm_records(VLLM_HELD_OUT)) + "\n"


def vllm_held_out_speed() -> str:
    from inferlab.study.engines.vllm import speed_markdown
    return speed_markdown(_vllm_records(VLLM_HELD_OUT)) + "\n"


def vllm_held_out_conclusion() -> str:
    from inferlab.study.engines.vllm import steplog_conclusion
    return steplog_conclusion(_vllm_records(VLLM_HELD_OUT)) + "\n"


VLLM_REPEAT_RULE = VLLM_RECORDS / "repeat-rule-2026-12-05"   # held out: the repeat rule
VLLM_PINNED = VLLM_RECORDS / "pinned-2026-12-05"             # held out: the front end pinned too (the current method)


def _series_regions(folder) -> dict:
    """A series' generated pieces: its runs (engines.vllm_report.runs_markdown), the disturbed runs the repeat
    rule kept (disturbed_markdown), each prediction's pieces, the engine's speed, and the conclusion."""
    from inferlab.study.engines import vllm as V

    def disturbed():
        table = V.disturbed_markdown(_vllm_records(folder))
        return (table or "No run of these repeats was disturbed: none was served again.") + "\n"

    return {"": lambda: _vllm_table(folder), "-disturbed": disturbed,
            "-pieces": lambda: V.pieces_markdown(_vllm_records(folder)) + "\n",
            "-speed": lambda: V.speed_markdown(_vllm_records(folder)) + "\n",
            "-conclusion": lambda: V.steplog_conclusion(_vllm_records(folder)) + "\n"}


def vllm_development_pinned() -> str:
    """The development runs that tried the pinned front end (VllmSettings.pin_front)."""
    return _vllm_table(VLLM_RECORDS / "development-pinned-2026-12-05")


def vllm_development_reniced() -> str:
    """The development runs of 2026-12-05 that chose the renicing: one without it, one with it."""
    return _vllm_table(VLLM_RECORDS / "development-2026-12-05")


def vllm_steplog() -> str:
    """The three repeats of 2026-12-05 against vLLM, predicted from vLLM's step log."""
    return _vllm_table(VLLM_STEPLOG)


def vllm_pieces() -> str:
    """The same repeats, each prediction's pieces taken away in turn (engines.vllm_report.pieces_markdown)."""
    from inferlab.study.engines.vllm import pieces_markdown
    records = [json.loads(p.read_text(encoding="utf-8")) for p in VLLM_STEPLOG.glob("*.json")]
    return pieces_markdown(sorted(records, key=lambda r: r["created"])) + "\n"


def vllm_speed() -> str:
    """The engine's speed through each of those repeats, on its fit (engines.vllm_report.speed_markdown)."""
    from inferlab.study.engines.vllm import speed_markdown
    records = [json.loads(p.read_text(encoding="utf-8")) for p in VLLM_STEPLOG.glob("*.json")]
    return speed_markdown(sorted(records, key=lambda r: r["created"])) + "\n"


def vllm_steplog_conclusion() -> str:
    """What those repeats say, in sentences built from them (engines.vllm_report.steplog_conclusion)."""
    from inferlab.study.engines.vllm import steplog_conclusion
    records = [json.loads(p.read_text(encoding="utf-8")) for p in VLLM_STEPLOG.glob("*.json")]
    return steplog_conclusion(sorted(records, key=lambda r: r["created"])) + "\n"


def subcommands() -> str:
    """Every subcommand of `inferlab` (and of its groups) with its one-line help, from the parser itself."""
    import argparse

    from inferlab.cli import build_parser
    rows = ["| command | what it does |", "|---|---|"]

    def walk(parser, prefix):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for name, sub in action.choices.items():
                    rows.append(f"| `{prefix} {name}` | {' '.join((helps.get(name) or '').split())} |")
                    walk(sub, f"{prefix} {name}")
    walk(build_parser(), "inferlab")
    return "\n".join(rows) + "\n"


REGIONS = {"verdict-counts": verdict_counts, "practice-measured": practice_measured, "simulator-vs-transformers": simulator_vs_transformers,
           "subcommands": subcommands, "vllm-development": vllm_development, "vllm-shared-host": vllm_shared_host,
           "vllm-steplog": vllm_steplog, "vllm-pieces": vllm_pieces,
           "vllm-steplog-conclusion": vllm_steplog_conclusion, "vllm-speed": vllm_speed,
           "vllm-reniced": vllm_reniced, "vllm-reniced-respread": vllm_reniced_respread,
           **{"vllm-repeat-rule" + k: f for k, f in _series_regions(VLLM_REPEAT_RULE).items()},
           **{"vllm-pinned" + k: f for k, f in _series_regions(VLLM_PINNED).items()},
           "vllm-development-pinned": vllm_development_pinned,
           "vllm-held-out": vllm_held_out, "vllm-held-out-pieces": vllm_held_out_pieces,
           "vllm-held-out-speed": vllm_held_out_speed, "vllm-held-out-conclusion": vllm_held_out_conclusion,
           "vllm-development-reniced": vllm_development_reniced,
           "kernel-fit-errors": lambda: _kernel_report().markdown(),
           "kernel-fit-numbers": lambda: _kernel_report().fitted_markdown(),
           "kernel-fit-fp8": lambda: _kernel_report().fp8_markdown()}


def _kernel_report():
    from inferlab.core.kernels import report
    return report


def render(text: str) -> str:
    """README text with every generated part regenerated."""
    def region(m):
        name = m["name"]
        if name not in REGIONS:
            raise ValueError(f"README: unknown generated region {name!r}; known: {sorted(REGIONS)}")
        return m.group(1) + REGIONS[name]() + m.group(4)
    text = REGION.sub(region, text)
    return CONSOLE.sub(lambda m: m.group(1) + console(m["body"]) + m.group(3), text)


FIGURE = ("15.1.1-fig1-roofline", ROOT / "docs" / "figures" / "roofline.png")


def write_figure() -> None:
    """The front page's figure, drawn again by `inferlab figures` (15.1.1's roofline, the book's scenario)."""
    import shutil
    import tempfile
    name, target = FIGURE
    with tempfile.TemporaryDirectory() as tmp:
        run([".venv/bin/inferlab", "figures", "--only", name, "--format", "png", "--out", tmp])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(tmp) / f"{name}.png", target)


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT / "lib"))
    write = "--write" in (argv if argv is not None else sys.argv[1:])
    if write:
        write_figure()
    stale = 0
    for page in PAGES:
        name = page.relative_to(ROOT)
        old = page.read_text(encoding="utf-8")
        new = render(old)
        if new == old:
            print(f"{name} is up to date")
        elif write:
            page.write_text(new, encoding="utf-8")
            print(f"wrote {name}")
        else:
            stale += 1
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(name), "regenerated"))
            print(f"{name} is stale: run `make readme` (python tools/readme_outputs.py --write)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
