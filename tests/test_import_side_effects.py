"""Nothing happens on import: importing every module of lib/inferlab leaves the state a notebook or a
program shares untouched (IPython's display formatters, matplotlib's settings, the warning filters,
numpy's error handling), and no module rewrites its own functions after defining them: a function
that runs wrapped says so with a decorator on its `def`.

The notebooks' display formatter is installed by an explicit call, `notebook.reader.install_display()`,
in each chapter's set-up cell; the yardstick marking is `@yardstick` on each function."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib" / "inferlab"
# Modules that are programs: importing them runs them (a command line, a sandbox's child process).
PROGRAMS = {"inferlab.__main__", "inferlab.exercises.__main__", "inferlab.exercises.sandbox_runner"}


def _modules():
    for path in sorted(LIB.rglob("*.py")):
        parts = path.relative_to(LIB.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name not in PROGRAMS and "student_stub" not in parts:
            yield name


SNAPSHOT = r"""
import importlib, json, sys, warnings
import numpy as np
import matplotlib
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()

def state():
    formatters = {mime: sorted(repr(t) for t in list(f.type_printers) + list(f.deferred_printers))
                  for mime, f in shell.display_formatter.formatters.items()}
    return {"formatters": formatters, "rc": {k: repr(v) for k, v in matplotlib.rcParams.items()},
            "warnings": [repr(f) for f in warnings.filters], "np_err": np.geterr()}

import torch  # measure's modules need it; its own import is not ours to judge
before = state()
failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError as err:
        failed.append(f"{name}: {err}")
after = state()
print(json.dumps({"before": before, "after": after, "failed": failed}))
"""


@pytest.fixture(scope="module")
def imported():
    out = subprocess.run([sys.executable, "-c", SNAPSHOT, *_modules()], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_module_imports(imported):
    assert imported["failed"] == []


def test_importing_the_library_installs_no_display_formatter(imported):
    changed = [m for m in imported["before"]["formatters"]
               if imported["before"]["formatters"][m] != imported["after"]["formatters"][m]]
    assert changed == []


def test_importing_the_library_changes_no_matplotlib_setting_warning_filter_or_numpy_mode(imported):
    rc_b, rc_a = imported["before"]["rc"], imported["after"]["rc"]
    assert [k for k in rc_b if rc_b[k] != rc_a.get(k)] == []
    assert imported["before"]["warnings"] == imported["after"]["warnings"]
    assert imported["before"]["np_err"] == imported["after"]["np_err"]


def test_install_display_is_what_installs_the_formatter():
    """The explicit call does what the import no longer does (in an IPython shell)."""
    code = ("from IPython.core.interactiveshell import InteractiveShell\n"
            "from matplotlib.figure import Figure\n"
            "shell = InteractiveShell.instance()\n"
            "png = shell.display_formatter.formatters['image/png']\n"
            "from inferlab.notebook import reader\n"
            "a = png.lookup_by_type(Figure) if Figure in png.type_printers else None\n"
            "reader.install_display()\n"
            "print(a is None, Figure in png.type_printers)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]


def _undecorated_defs(path: Path):
    tree = ast.parse(path.read_text())
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.decorator_list]


@pytest.mark.parametrize("name", list(_modules()))
def test_no_module_rewrites_a_function_it_defines_without_a_decorator(name):
    """A top-level `def` without decorators is, after the import, still that function (its own code,
    not a wrapper's): nothing wraps the module's functions behind the reader's back."""
    import importlib
    module = importlib.import_module(name)
    path = Path(module.__file__)
    rewritten = [fn for fn in _undecorated_defs(path)
                 if callable(getattr(module, fn, None)) and getattr(getattr(module, fn), "__code__", None) is not None
                 and (getattr(module, fn).__code__.co_name != fn
                      or Path(getattr(module, fn).__code__.co_filename).resolve() != path.resolve())]
    assert rewritten == []


COMPUTE_NOTHING = {"install_display"}  # reader's set-up call: installs a formatter, computes no quantity
YARDSTICK_MODULES = ["claims.reconstructed_formulas", "notebook.interview", "notebook.interview_drills",
                     "notebook.interactive", "notebook.plots", "notebook.panel", "notebook.cheatsheet",
                     "notebook.reader", "notebook.measured_plots"]


@pytest.mark.parametrize("name", YARDSTICK_MODULES)
def test_the_public_functions_of_the_pages_and_formulas_are_marked_yardsticks(name):
    """These modules reproduce the book's numbers and sweep past a model's context on purpose (the
    100k-token prompt on Llama-2 13B): every public function defined there carries @yardstick."""
    path = LIB / (name.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text())
    unmarked = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
                and "yardstick" not in [ast.unparse(d) for d in n.decorator_list] and n.name not in COMPUTE_NOTHING]
    assert unmarked == []


def test_a_marked_function_computes_past_the_context_without_a_warning():
    """What the marking guarantees: the book's 100k-token TTFT table on Llama-2 13B (4,096 tokens of
    context) computes without a ContextLengthWarning."""
    import warnings
    from inferlab.claims.reconstructed_formulas import TABLES
    from inferlab.core.context import ContextLengthWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        TABLES["ttft"]("llama-2-13b", "h100-sxm", [1000, 100_000])
