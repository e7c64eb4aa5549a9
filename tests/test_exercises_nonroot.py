"""The grader run without root (the usual instructor setup), as far as this machine allows. The tests
run as root, so the grader's non-root path (bubblewrap in a user namespace, `--unshare-user`, the caller's
uid kept inside, RLIMIT_NPROC counted on top of the caller's processes) is reached two ways:

- `userns`: `unshare --user --map-user=1000`: the grader sees uid 1000 and holds no capability outside its
  user namespace, so it takes the non-root path; the kernel still checks files against root's uid (owner
  permissions), so what keeps a submission from the library and its siblings is the sandbox alone;
- `setpriv`: a real unprivileged uid (65534). Where the Python installation is not readable by that uid
  (here: pyenv under /root, mode 0700, which bwrap cannot bind), it skips and says so.

The submissions belong to the grading user, so only the sandbox keeps one from overwriting another.
RIGHT (Llama 3 70B, S = 8192, bf16): 2 * 80 layers * 8 KV heads * 128 * 8192 * 2 bytes = 2.68435456 GB.
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from hang_guard import HANG_S

RIGHT = 2.68435456  # GB, see the module docstring
UID = 65534  # nobody
ROOT = Path(__file__).resolve().parents[1]


def _setpriv(uid):
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def _userns():
    return ["unshare", "--user", "--map-user=1000", "--map-group=1000"]


def _bwrap_probe(prefix) -> str | None:
    proc = subprocess.run(prefix + ["bwrap", "--unshare-user", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev",
                                    "--proc", "/proc", "--die-with-parent", "true"], capture_output=True, timeout=HANG_S)
    if proc.returncode:
        return f"bwrap does not start there ({proc.stderr.decode(errors='replace').strip()[:120]})"
    return None


def _reason(mode: str) -> str | None:
    if os.getuid() != 0:
        return "the test switches users, which needs root (run as an unprivileged user, `make test` already " \
               "exercises this path in test_exercises_sandbox.py)"
    tool = {"setpriv": "setpriv", "userns": "unshare"}[mode]
    if not shutil.which(tool) or not shutil.which("bwrap"):
        return f"{tool} or bwrap missing"
    prefix = _setpriv(UID) if mode == "setpriv" else _userns()
    if mode == "setpriv":
        for path in {Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent}:
            if subprocess.run(prefix + ["test", "-r", str(path), "-a", "-x", str(path)]).returncode:
                return f"the Python installation ({path}) is not readable by uid {UID}, so bwrap cannot bind it"
    return _bwrap_probe(prefix)


def notebook(*cells):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


@pytest.mark.parametrize("mode", ["userns", "setpriv"])
def test_a_grader_without_root_sandboxes_and_scores_correctly(mode):
    reason = _reason(mode)
    if reason:
        pytest.skip(reason)
    prefix = _setpriv(UID) if mode == "setpriv" else _userns()
    base = Path(tempfile.mkdtemp(prefix="inferlab-nonroot-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        subs, tmp = base / "subs", base / "tmp"
        subs.mkdir()
        tmp.mkdir()
        secret = base / "answer_key.txt"  # readable by the grading user, not by a submission
        secret.write_text("the answer key")
        cases = {
            "honest": notebook("from inferlab.exercises import check",
                               "from inferlab.core.memory import kv_cache_bytes\nfrom inferlab.core.specs import get_model\n"
                               "ex1 = kv_cache_bytes(get_model('llama-3-70b'), 8192) / 1e9",
                               'check("15.1.2-ex1", ex1)'),
            "wrong": notebook("from inferlab.exercises import check", "ex1 = 21.47483648", 'check("15.1.2-ex1", ex1)'),
            "write_sibling": notebook("from inferlab.exercises import check", "ex1 = None",
                                      f"open({str(subs / 'honest.ipynb')!r}, 'w').write('{{}}')\nex1 = {RIGHT!r}",
                                      'check("15.1.2-ex1", ex1)'),
            "read_outside": notebook("from inferlab.exercises import check", "ex1 = None",
                                     f"open({str(secret)!r}).read()\nex1 = {RIGHT!r}", 'check("15.1.2-ex1", ex1)'),
        }
        for name, nb in cases.items():
            nbformat.write(nb, subs / f"{name}.ipynb")
        if mode == "setpriv":
            for p in [base, subs, tmp, secret, *subs.iterdir()]:
                os.chown(p, UID, UID)
        before = {p.name: p.read_bytes() for p in subs.iterdir()}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base), "TMPDIR": str(tmp),
               "LANG": "C.UTF-8"}
        if os.environ.get("PYTHONPATH"):  # the library under test, where it is not the installed one
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        proc = subprocess.run(prefix + [sys.executable, "-c", "import os; print(os.getuid())"], capture_output=True,
                              text=True, timeout=HANG_S)
        assert proc.stdout.strip() != "0"  # the grader below does not run as root
        proc = subprocess.run(prefix + [sys.executable, "-m", "inferlab.exercises", "grade", str(subs), "--out", str(base / "out"),
                               "--sections", "15.1.2", "--cell-timeout", "20", "--time-limit", "60", "--jobs", "2",
                               "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S)
        assert proc.returncode == 0, proc.stderr[-2000:]
        with open(base / "out" / "grades.csv", newline="") as fh:
            table = {r["student_id"]: r for r in csv.DictReader(fh)}
        assert float(table["honest"]["15.1.2-ex1"]) == 1
        assert float(table["wrong"]["15.1.2-ex1"]) == 0
        assert float(table["write_sibling"]["15.1.2-ex1"]) == 0  # the same uid, yet the sibling is out of reach
        assert float(table["read_outside"]["15.1.2-ex1"]) == 0
        assert {p.name: p.read_bytes() for p in subs.iterdir()} == before
        assert list(tmp.iterdir()) == []  # private work folders removed
    finally:
        shutil.rmtree(base, ignore_errors=True)
