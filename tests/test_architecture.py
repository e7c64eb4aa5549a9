"""The library's layering (ARCHITECTURE.md): every module of lib/inferlab belongs to one package of the
document's table; an import from one package into another is one its row allows; no import circle
between modules; the core never resolves a name (get_model, get_accelerator, as_precision,
measure.plan.resolve_model): only the edges listed in ARCHITECTURE.md do; the imports its "never imports"
rules forbid appear nowhere, not even through other modules; and every module or path the document
names exists.

The packages and what each may import are read from ARCHITECTURE.md's table, so the document and the
code cannot drift apart, and a new module inside a package needs no edit of either. The checks are
plain functions, each also run on a small made-up graph that breaks its rule, so a check that could
never fail is caught too.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib"
PACKAGE = LIB / "inferlab"
DOC = ROOT / "ARCHITECTURE.md"
RESOLVERS = ("get_model", "get_accelerator", "as_precision", "resolve_model")


# -- reading the code and the document -----------------------------------------------------------------

def module_name(path: Path) -> str:
    """'costs' for lib/inferlab/core/costs.py, 'serving' for lib/inferlab/serving/__init__.py, 'inferlab'
    for the package's own __init__."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "inferlab"


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _target(dotted: str) -> str | None:
    """'inferlab.serving.kv' -> 'serving.kv'; 'inferlab' -> 'inferlab'; other packages -> None."""
    if dotted == "inferlab":
        return "inferlab"
    if dotted.startswith("inferlab."):
        return dotted[len("inferlab."):]
    return None


def imports_of(source: str, known: set[str]) -> set[str]:
    """The library modules `source` imports, anywhere in it (a function-level import is a dependency
    too). `from inferlab.measure import device` is an import of measure.device (a submodule), not of
    the package's __init__; `from inferlab.serving import simulate` (a function) is one of serving."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                t = _target(alias.name)
                if t:
                    out.add(t)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            base = _target(node.module)
            if base is None:
                continue
            for alias in node.names:
                sub = alias.name if base == "inferlab" else f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = all_modules()
    known = set(mods)
    return {m: imports_of(p.read_text(), known) - {m} for m, p in mods.items()}


def read_packages(text: str) -> dict[str, set[str]]:
    """{package: the packages it may import} from the table of ARCHITECTURE.md: rows
    `| `pkg` | what it is | `dep`, `dep` |` ("nothing of ours": none; "every package": all of them)."""
    rows = {}
    for line in text.split("\n## ", 1)[0].splitlines():
        m = re.match(r"^\|\s*`([\w]+)`\s*\|[^|]*\|([^|]*)\|\s*$", line)
        if not m:
            continue
        if m.group(1) in rows:
            raise ValueError(f"ARCHITECTURE.md has two rows for {m.group(1)}")
        cell = m.group(2).strip()
        rows[m.group(1)] = {"*"} if cell == "every package" else set(re.findall(r"`(\w+)`", cell))
    return {p: (set(rows) - {p}) if deps == {"*"} else deps for p, deps in rows.items()}


def package_of(module: str) -> str:
    """The package a module belongs to: its first name ('core' for core.kernels.linear); the top-level
    modules: 'inferlab' for the package's __init__, 'cli' for cli and __main__."""
    if module in ("cli", "__main__"):
        return "cli"
    return module.split(".")[0]


def read_resolving(text: str) -> set[str]:
    """The modules allowed to resolve names: the `mod` items of the list under the heading
    'Where names are resolved' in ARCHITECTURE.md (up to the next heading)."""
    section = text.split("## Where names are resolved", 1)[1].split("\n## ", 1)[0]
    return {mod for line in section.splitlines() if line.startswith("- ")
            for mod in re.findall(r"`([\w.]+)`", line.split(":", 1)[0])}


def external_imports(source: str) -> set[str]:
    """The top-level names of the packages outside the library `source` imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out - {"inferlab"}


def top_level_names(source: str) -> set[str]:
    """What a module defines or imports at its top: functions, classes, assigned and imported names."""
    out = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def read_never(text: str) -> list[tuple[list[str], list[str]]]:
    """The rules of ARCHITECTURE.md's 'never imports' lines: `- `a`, `b` never imports `c` or `d`: why`
    gives (['a', 'b'], ['c', 'd']). A name ending in '.*' stands for a package and its modules."""
    rules = []
    for line in text.splitlines():
        if line.startswith("- ") and " never import" in line:
            before, after = line.split(" never import", 1)
            targets = after.split(":", 1)[0]
            rules.append((re.findall(r"`([\w.*]+)`", before), re.findall(r"`([\w.*]+)`", targets)))
    return rules


def _matches(name: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return name == pattern[:-2] or name.startswith(pattern[:-1])
    return name == pattern


def forbidden_imports(graph: dict[str, set[str]], externals: dict[str, set[str]], rules) -> list[str]:
    """Every rule broken: 'a imports b (through a -> x -> b)' for a library module b, or 'a imports
    torch (through a -> x)' for a package outside the library, over the imports' transitive closure."""
    out = []
    for sources, targets in rules:
        for a in sorted(m for m in graph if any(_matches(m, s) for s in sources)):
            paths, frontier = {a: [a]}, [a]
            while frontier:
                nxt = []
                for v in frontier:
                    for w in sorted(graph.get(v, ())):
                        if w not in paths:
                            paths[w] = paths[v] + [w]
                            nxt.append(w)
                frontier = nxt
            for b, path in sorted(paths.items()):
                hit = [t for t in targets if _matches(b, t)] if b != a else []
                hit += [t for t in targets if t in externals.get(b, ())]
                out += [f"{a} imports {t} (through {' -> '.join(path)})" for t in hit]
    return out


def named_but_missing(text: str, modules: dict[str, str]) -> list[str]:
    """Names in `backticks` that look like the library's (a dotted name whose first part is a module
    or package of it) but are neither a module nor a top-level name of the longest module they start
    with; and relative paths (`data/claims.toml`) that do not exist. `modules` maps name -> source."""
    out = []
    firsts = {m.split(".")[0] for m in modules}
    for token in sorted(set(re.findall(r"`([^`\s]+)`", text))):
        if "/" in token and re.fullmatch(r"[\w./-]+", token) and "." in token.rsplit("/", 1)[-1]:
            if not (ROOT / token).exists():
                out.append(f"{token}: no such file")
            continue
        name = token[:-2] if token.endswith(".*") else token
        name = name[len("inferlab."):] if name.startswith("inferlab.") else name
        if not re.fullmatch(r"[A-Za-z_]\w*(\.\w+)+", name) or name.split(".")[0] not in firsts:
            continue
        if name in modules:
            continue
        parts = name.split(".")
        prefix = next((".".join(parts[:k]) for k in range(len(parts) - 1, 0, -1) if ".".join(parts[:k]) in modules),
                      None)
        if prefix is None:
            out.append(f"{token}: no module {name}")
        elif parts[len(prefix.split("."))] not in top_level_names(modules[prefix]):
            out.append(f"{token}: module {prefix} has no {parts[len(prefix.split('.'))]}")
    return out


def section(text: str, heading: str) -> str:
    return text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]


# -- the rules, as functions of a graph --------------------------------------------------------------

def crossing_imports(graph: dict[str, set[str]], allowed: dict[str, set[str]]) -> list[str]:
    """Every import from a module into another package that the importing package's row does not allow
    (and every module whose package has no row)."""
    out = []
    for a, deps in graph.items():
        pa = package_of(a)
        if pa not in allowed:
            out.append(f"{a}: package {pa} has no row in ARCHITECTURE.md")
            continue
        out += [f"{a} ({pa}) imports {b} ({package_of(b)}), which {pa} may not import"
                for b in sorted(deps) if package_of(b) != pa and package_of(b) not in allowed[pa]]
    return sorted(out)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, each as a path a -> ... -> a (one per strongly connected component)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                out.append(_cycle_path(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _cycle_path(graph, component: set[str]) -> list[str]:
    """One circle through the component, from its first module (breadth-first back to the start)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return sorted(component)


def resolver_calls(source: str) -> list[tuple[int, str]]:
    """(line, name) of every call of a resolver (get_model(...), specs.get_accelerator(...), ...)."""
    tree = ast.parse(source)
    names = {r: r for r in RESOLVERS}  # a resolver imported under another name is still one
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.update({a.asname: a.name for a in node.names if a.asname and a.name in RESOLVERS})
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in names:
                out.append((node.lineno, names[name]))
    return sorted(out)


# -- the rules can fail ---------------------------------------------------------------------------------

def test_the_checks_catch_what_they_name():
    allowed = {"base": set(), "core": {"base"}, "notebook": {"base", "core"}, "cli": {"base", "core", "notebook"}}
    assert crossing_imports({"notebook.plots": {"core.costs"}, "core.costs": {"base.units", "core.specs"},
                             "cli": {"notebook.plots"}}, allowed) == []
    assert crossing_imports({"core.costs": {"notebook.plots"}}, allowed) == [
        "core.costs (core) imports notebook.plots (notebook), which core may not import"]
    assert crossing_imports({"base.units": {"core.specs"}}, allowed) == [
        "base.units (base) imports core.specs (core), which base may not import"]
    assert crossing_imports({"extras.x": set()}, allowed) == ["extras.x: package extras has no row in ARCHITECTURE.md"]
    assert package_of("core.kernels.linear") == "core" and package_of("__main__") == "cli"
    assert package_of("inferlab") == "inferlab"
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert circles({"exercises.grade": {"exercises.student"}, "exercises.student": {"exercises.grade"}}) == [
        ["exercises.grade", "exercises.student", "exercises.grade"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert imports_of("from inferlab.measure import device as d\nfrom inferlab.serving import simulate\n"
                      "def f():\n    from inferlab.claims.quantities import model_variant\n",
                      {"measure", "measure.device", "serving", "serving.simulate", "claims.quantities"}) \
        == {"measure.device", "serving.simulate", "claims.quantities"}
    assert imports_of("from inferlab import get_model, plots\nimport inferlab.costs\n", {"inferlab", "plots", "costs"}) \
        == {"inferlab", "plots", "costs"}
    assert resolver_calls("m = get_model(name)\na = specs.get_accelerator(x)\np = Precision()\n") == [
        (1, "get_model"), (2, "get_accelerator")]
    assert resolver_calls("from inferlab.core.specs import as_precision as p\nq = p(x)\n") == [(2, "as_precision")]
    text = ("| package | what | may import |\n|---|---|---|\n| `base` | checks | nothing of ours |\n"
            "| `core` | physics, `core.specs` | `base` |\n| `cli` | the edge | every package |\n\n"
            "## Where names are resolved\n- `cli`, `commands.serving`: the CLIs\n"
            "- `notebook.reader`: what_if\n\n## Next\n- `core.costs`: not here\n| `x` | y | `z` |\n")
    assert read_packages(text) == {"base": set(), "core": {"base"}, "cli": {"base", "core"}}
    assert read_resolving(text) == {"cli", "commands.serving", "notebook.reader"}


def test_the_document_checks_catch_what_they_name():
    graph = {"serving": {"serving.simulate"}, "serving.simulate": {"serving.kv"}, "serving.kv": set(),
             "serving.study.live": {"serving.kv"}, "claims.x": set()}
    rules = read_never("- `serving`, `claims.*` never import `serving.study.*` or `torch`: why\n"
                       "- `serving.kv` never imports `serving.simulate`: why\n- not a rule\n")
    assert rules == [(["serving", "claims.*"], ["serving.study.*", "torch"]), (["serving.kv"], ["serving.simulate"])]
    assert forbidden_imports(graph, {}, rules) == []
    graph["serving.kv"] = {"serving.study.live"}
    assert forbidden_imports(graph, {"serving.study.live": {"torch"}}, rules[:1]) == [
        "serving imports serving.study.* (through serving -> serving.simulate -> serving.kv -> serving.study.live)",
        "serving imports torch (through serving -> serving.simulate -> serving.kv -> serving.study.live)"]
    assert forbidden_imports({"claims.x": set()}, {"claims.x": {"torch"}}, rules[:1]) == [
        "claims.x imports torch (through claims.x)"]
    assert external_imports("import torch.nn\nfrom numpy import array\ndef f():\n    import matplotlib.pyplot\n"
                            "from inferlab import costs\n") == {"torch", "numpy", "matplotlib"}
    modules = {"costs": "def prefill_costs(): pass\nX = 1\n", "serving.study.live": "class LiveResult: pass\n",
               "serving.study": ""}
    text = ("`costs.prefill_costs`, `costs.X`, `inferlab.costs`, `serving.study.live.LiveResult`, `get_model`, "
            "`costs.gone`, `serving.studdy.live`, `step_time.f`, `serving.study.*`, `data/none.toml`, `pyproject.toml`")
    assert named_but_missing(text, modules) == ["costs.gone: module costs has no gone", "data/none.toml: no such file",
                                                "serving.studdy.live: no module serving.studdy.live"]


# -- the library keeps them -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text()


@pytest.fixture(scope="module")
def packages(doc) -> dict[str, set[str]]:
    return read_packages(doc)


def test_every_module_is_in_a_package_of_the_table(packages):
    assert sorted({package_of(m) for m in all_modules()} - set(packages)) == [], \
        "packages missing from ARCHITECTURE.md's table"
    assert sorted(set(packages) - {package_of(m) for m in all_modules()}) == [], \
        "ARCHITECTURE.md names packages that do not exist"
    top = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py")
    assert top == ["__init__.py", "__main__.py", "cli.py"], "lib/inferlab/ holds packages, its __init__, __main__ and cli"


def test_no_import_crosses_into_a_package_its_row_does_not_allow(packages):
    assert crossing_imports(import_graph(), packages) == []


def test_no_import_circle():
    assert [" -> ".join(c) for c in circles(import_graph())] == []


def test_the_core_never_resolves_a_name(doc):
    allowed = read_resolving(doc)
    mods = all_modules()
    assert "core.specs" in allowed and sorted(allowed - set(mods)) == []
    found = [f"{m}:{line} calls {name}" for m, p in mods.items() if m not in allowed
             for line, name in resolver_calls(p.read_text())]
    assert found == [], "a core module resolves a name; take the object instead (resolve at the edge)"


def test_a_name_given_to_the_core_says_which_function_and_which_resolver():
    from inferlab.core import costs, latency, memory, roofline
    from inferlab.serving.steptime import RooflineStepTime
    from inferlab.core.specs import Precision, get_accelerator, get_model

    m, a = get_model("llama-2-13b"), get_accelerator("h100-sxm")
    with pytest.raises(TypeError) as err:
        costs.prefill_costs("llama-2-13b", 1, 128)
    assert str(err.value) == ("costs.prefill_costs(model=...): expected ModelConfig, got str 'llama-2-13b'; "
                              "resolve names with inferlab.core.specs.get_model")
    with pytest.raises(TypeError, match=r"^latency\.decode_step_time_s\(deployment=\.\.\.\): expected Deployment or "
                                        r"Accelerator, got str 'h100-sxm'; resolve names with inferlab\.core\.specs\.get_accelerator$"):
        latency.decode_step_time_s(m, "h100-sxm", 1024)
    with pytest.raises(TypeError, match=r"^memory\.weight_bytes\(precision=\.\.\.\): expected Precision, got str 'int8'; "
                                        r"build one with inferlab\.core\.specs\.Precision"):
        memory.weight_bytes(m, "int8")
    with pytest.raises(TypeError, match=r"^roofline\.ridge_point\(accelerator=\.\.\.\)"):
        roofline.ridge_point("h100-sxm")
    with pytest.raises(TypeError, match=r"^serving\.steptime\.RooflineStepTime\.__init__\(model=\.\.\.\)"):
        RooflineStepTime("llama-2-13b", a)
    # objects pass, and give the numbers the names gave before
    assert memory.weight_bytes(m, Precision()) == m.n_params * 2


def test_no_import_a_rule_of_the_document_forbids(doc):
    rules = read_never(section(doc, "What never imports what"))
    mods = all_modules()
    assert len(rules) >= 3 and all(s and t for s, t in rules)
    assert [s for sources, _ in rules for s in sources if not any(_matches(m, s) for m in mods)] == [], \
        "a rule names a module that does not exist"
    externals = {m: external_imports(p.read_text()) for m, p in mods.items()}
    assert forbidden_imports(import_graph(), externals, rules) == []


def test_every_name_the_document_gives_exists(doc):
    mods = {m: p.read_text() for m, p in all_modules().items()}
    assert named_but_missing(doc, mods) == []


def test_every_study_file_has_one_job(doc):
    # the job table of "The validation study's pipelines": each module of study in one row
    # (run a pipeline, control a process, write tables and prose, ...), none in two
    rows = [line for line in section(doc, "The validation study's pipelines").splitlines()
            if line.startswith("| ") and not line.startswith(("| job", "| engine"))
            and line.count("|") == 3]
    jobs = {}
    for row in rows:
        job, files = row.strip("|").split("|")
        for mod in re.findall(r"`([\w.]+)`", files):
            jobs.setdefault(mod, []).append(job.strip())
    study = {m for m in all_modules() if m.startswith("study.") and m != "study.engines"}
    assert sorted(m for m, js in jobs.items() if len(js) > 1) == [], "a study file with two jobs"
    assert sorted(study - set(jobs)) == [], "study files the job table leaves out"


def check_calls_in_core(sources: dict[str, str]) -> list[str]:
    """'module:line calls check_x' for every call of a check_* guard in a core module other than
    core.specs (which defines them): the core checks its objects once, where a call enters it
    (core.boundary.enters), and trusts them inside."""
    out = []
    for mod, source in sources.items():
        if not mod.startswith("core.") or mod in ("core.specs", "core.boundary"):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in ("check_model", "check_accelerator", "check_precision"):
                    out.append(f"{mod}:{node.lineno} calls {name}")
    return out


def test_the_core_checks_its_objects_where_a_call_enters_it_only():
    assert check_calls_in_core({"core.x": "def f(model):\n    model = check_model(model)\n",
                                "core.specs": "def check_model(m):\n    return m\n",
                                "serving.y": "check_model(m)\n"}) == ["core.x:2 calls check_model"]
    mods = {m: p.read_text() for m, p in all_modules().items()}
    assert check_calls_in_core(mods) == []


def test_a_call_is_checked_once_where_it_enters_the_core(monkeypatch):
    from inferlab.core import boundary, memory
    from inferlab.core.specs import BF16, get_accelerator, get_model

    m, a = get_model("llama-2-13b"), get_accelerator("h100-sxm")
    seen = []
    real = boundary.isinstance if hasattr(boundary, "isinstance") else isinstance

    def counting(value, cls):
        seen.append(cls.__name__)
        return real(value, cls)
    monkeypatch.setattr(boundary, "isinstance", counting, raising=False)
    # max_batch calls weight_bytes and kv_cache_bytes (both @enters) inside: only its own 3 arguments
    # are checked, once each
    memory.max_batch(m, a, 4096, BF16)
    assert sorted(seen) == ["Accelerator", "ModelConfig", "Precision"]
    seen.clear()
    memory.weight_bytes(m, BF16)
    assert sorted(seen) == ["ModelConfig", "Precision"]
    with pytest.raises(TypeError, match=r"^memory\.max_batch\(accelerator=\.\.\.\): expected Accelerator, "
                                        r"got str 'h100-sxm'; resolve names with inferlab\.core\.specs\.get_accelerator$"):
        memory.max_batch(m, "h100-sxm", 4096)
    # a refused call leaves the core: the next call from outside is checked again
    with pytest.raises(TypeError, match=r"^memory\.weight_bytes\(model=\.\.\.\)"):
        memory.weight_bytes("llama-2-13b")
