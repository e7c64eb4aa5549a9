"""`inferlab verify` (the claims table) and `inferlab errata` (write or check ERRATA.md)."""
from __future__ import annotations

import sys
from pathlib import Path

from inferlab.claims.registry import SECTIONS, VERDICTS, RegistryError
from inferlab.claims.statements import STATEMENT_VERDICTS


def _repo_root() -> Path:
    from inferlab.core.specs import data_dir
    return data_dir().parent


def _evaluate(args):
    from inferlab.claims.evaluate import evaluate_registry
    from inferlab.claims.registry import load_registry
    registry = load_registry(args.registry)
    return registry, evaluate_registry(registry, getattr(args, "section", None),
                                       getattr(args, "verdict", None))


def _cmd_verify_statements(args) -> int:
    from inferlab.claims.statements import as_json, evaluate_statements, load_statements, table
    try:
        evaluated = evaluate_statements(load_statements(args.statements), getattr(args, "section", None),
                                        args.statement_verdict)
    except RegistryError as err:
        print(f"inferlab verify: error: {err}", file=sys.stderr)
        return 2
    print(as_json(evaluated) if args.json else table(evaluated))
    return 0


def _cmd_verify_book(args) -> int:
    from inferlab.claims import draft
    for flag, value in (("--section", args.section), ("--verdict", args.verdict),
                        ("--statement-verdict", args.statement_verdict)):
        if value is not None:
            raise ValueError(f"{flag} does not apply with --book (the report covers every claim and statement)")
    if args.kind != "number":
        raise ValueError("--kind does not apply with --book (the report covers claims and statements)")
    try:
        from inferlab.claims.registry import load_registry
        from inferlab.claims.statements import load_statements
        registry, statements = load_registry(args.registry), load_statements(args.statements)
        new = draft.verify_text(args.book, registry=registry, statements=statements)
        if args.against is None:
            print(new.as_json() if args.json else draft.table(new))
            return new.exit_code
        old = draft.verify_text(args.against, registry=registry, statements=statements)
    except RegistryError as err:
        print(f"inferlab verify: error: {err}", file=sys.stderr)
        return 2
    diff = draft.compare(old, new, registry, statements)
    print(draft.diff_json(diff, old, new) if args.json else draft.diff_markdown(diff, old, new))
    return new.exit_code


def _cmd_verify(args) -> int:
    from inferlab.claims.render import as_json, explanations, table
    if args.book is not None:
        return _cmd_verify_book(args)
    if args.against is not None:
        raise ValueError("--against OLD needs --book NEW (the draft compared with OLD)")
    # Options of the other --kind would be ignored: refuse them.
    if args.kind == "statement" and (args.verdict is not None or args.registry is not None):
        raise ValueError(f"--{'verdict' if args.verdict is not None else 'registry'} applies to --kind number; "
                         "with --kind statement use --statement-verdict / --statements")
    if args.kind == "number" and (args.statement_verdict is not None or args.statements is not None):
        raise ValueError(f"--{'statement-verdict' if args.statement_verdict is not None else 'statements'} "
                         "applies to --kind statement; add --kind statement or leave it out")
    if args.kind == "statement":
        return _cmd_verify_statements(args)
    try:
        registry, claims = _evaluate(args)
    except RegistryError as err:
        print(f"inferlab verify: error: {err}", file=sys.stderr)
        return 2
    from inferlab.claims import measured
    # The practice claims among those listed, against measured kernels (the registry's verdicts stay the ideal's).
    practice = measured.practice_claims(ids={c.id for c in claims}, registry=registry)
    listed = {c.id for c in claims}
    quantization = ([q for q in measured.quantization_claims(registry) if q.id in listed]
                    if listed & {cid for cid, _, _ in measured.QUANTIZATION} else [])
    if args.json:
        print(as_json(claims, extra={"practice_measured": measured.as_dicts(practice),
                                     "quantization_measured": [q.as_dict() for q in quantization]}))
        return 0
    print(table(claims))
    notes = explanations(claims)
    if notes:
        print("\nWhy (every claim that is not consistent):")
        print(notes)
    if practice:
        print("\n" + measured.table(practice))
    if quantization:
        print("\n" + measured.quantization_table(quantization))
    from inferlab.claims import crosscheck
    from inferlab.claims.statements import load_statements
    found = crosscheck.contradictions(registry, load_statements(), claim_verdicts={c.id: c.verdict for c in claims})
    if args.section is not None or args.verdict is not None:  # only the contradictions that touch what is listed
        shown = {c.id for c in claims}
        in_section = lambda i: args.section is not None and i.startswith(args.section + "-")  # noqa: E731
        found = [c for c in found if c.a in shown or c.b in shown
                 or (c.kind == "statements" and args.verdict is None and (in_section(c.a) or in_section(c.b)))]
    print("\n" + crosscheck.table(found))
    return 0


def _cmd_errata(args) -> int:
    from inferlab.claims.render import errata_document
    if args.book is not None and args.output is None:
        raise ValueError("--book needs --output (ERRATA.md at the repository root is the registered text's)")
    path = Path(args.output) if args.output else _repo_root() / "ERRATA.md"
    # The output is checked before the registry is evaluated: a folder or an unwritable path fails now.
    if not args.check:
        from inferlab.base.input_checks import writable_file
        writable_file("--output", args.output or path)
    elif path.is_dir() or str(args.output).endswith(("/", "\\")):
        raise ValueError(f"--output must be a file, not a directory; got {str(args.output or path)!r}")
    try:
        if args.book is not None:
            from inferlab.claims.draft import verify_text
            from inferlab.claims.registry import load_registry
            from inferlab.claims.statements import load_statements
            registry = load_registry(args.registry)
            report = verify_text(args.book, registry=registry, statements=load_statements(args.statements))
            text = errata_document([c.evaluated for c in report.claims if c.change != "removed"], registry.defaults,
                                   statements=[s.evaluated for s in report.statements if s.change != "removed"],
                                   source=report.path.name, contradictions=report.contradictions)
        else:
            registry, claims = _evaluate(args)
            from inferlab.claims.statements import evaluate_statements, load_statements
            text = errata_document(claims, registry.defaults,
                                   statements=evaluate_statements(load_statements(args.statements)))
    except RegistryError as err:
        print(f"inferlab errata: error: {err}", file=sys.stderr)
        return 2
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            print(f"inferlab errata: {path} is out of date with data/claims.toml; "
                  "run `inferlab errata` and commit the result", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    from inferlab.base.atomicio import write_text_atomic
    write_text_atomic(path, text)
    print(f"wrote {path}")
    return 0


def register(subparsers) -> None:
    verify = subparsers.add_parser(
        "verify", help="check every number of the chapter against the library",
        description="Evaluate data/claims.toml: the book's value, ours, and a computed verdict "
                    "(consistent, approximation, erratum, unchecked) per claim.")
    verify.add_argument("--section", choices=SECTIONS, help="only this subsection")
    verify.add_argument("--kind", choices=("number", "statement"), default="number",
                        help="number: the chapter's numbers (data/claims.toml, the default); statement: its "
                             "mechanisms, comparisons and advice, each checked by an experiment "
                             "(data/statements.toml)")
    verify.add_argument("--verdict", choices=VERDICTS, help="only claims with this verdict (--kind number)")
    verify.add_argument("--statement-verdict", choices=STATEMENT_VERDICTS, default=None,
                        help="only statements with this verdict (--kind statement)")
    verify.add_argument("--statements", default=None, help="a statements file other than data/statements.toml")
    verify.add_argument("--json", action="store_true", help="machine-readable output")
    verify.add_argument("--registry", default=None, help="a claims file other than data/claims.toml")
    verify.add_argument("--book", default=None, metavar="FILE|DIR",
                        help="judge every claim and statement against this text of the chapter (a draft): "
                             "lines found by content, changed numbers re-judged, unaccounted lines listed; "
                             "exit 0 when it only confirms, 1 when something got worse or is unaccounted")
    verify.add_argument("--against", default=None, metavar="OLD",
                        help="with --book NEW: the table of what changed from the draft OLD to NEW "
                             "(Markdown, or JSON with --json)")
    verify.set_defaults(func=_cmd_verify)

    errata = subparsers.add_parser(
        "errata", help="write ERRATA.md from the claims registry (--check: fail if stale)")
    errata.add_argument("--check", action="store_true",
                        help="exit 1 if the file differs from what the registry gives")
    errata.add_argument("--output", default=None, help="path to write (default: ERRATA.md at the repository root)")
    errata.add_argument("--registry", default=None, help="a claims file other than data/claims.toml")
    errata.add_argument("--statements", default=None, help="a statements file other than data/statements.toml")
    errata.add_argument("--book", default=None, metavar="FILE|DIR",
                        help="the errata of this text of the chapter (a draft: numbers as printed there, "
                             "re-judged); needs --output")
    errata.set_defaults(func=_cmd_errata)
