"""The Gradescope bundle, run as Gradescope runs it: unpacked into <root>/source, the submission in
<root>/submission, the metadata beside it, `run_autograder` executed, <root>/results/results.json read back
(INFERLAB_AUTOGRADER_ROOT stands for /autograder, so no root rights are needed).

The expected KV cache is hand-computed (2 * layers * n_kv_heads * head_dim * S * 2 bytes, bf16).
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from inferlab.exercises import get, variant
from inferlab.exercises import sandbox as sb
from inferlab.exercises.gradescope import build_bundle, student_id

ROOT = Path(__file__).resolve().parents[1]
KEY = bytes(range(32))
ARCH = {"llama-3-70b": (80, 8, 128), "llama-3-8b": (32, 8, 128), "mistral-7b": (32, 8, 128)}
IDS = [f"15.1.2-ex{i}" for i in range(1, 6)]


def test_the_student_id_is_the_sid_else_the_email():
    assert student_id({"users": [{"sid": " s01 ", "email": "a@b.c"}]}) == "s01"
    assert student_id({"users": [{"sid": "", "email": "a@b.c"}]}) == "a@b.c"
    assert student_id({}) is None and student_id({"users": []}) is None


def test_the_bundle_holds_what_the_harness_runs(tmp_path):
    zpath = build_bundle(IDS, tmp_path / "autograder.zip", assignment="hw1", key=KEY)
    with zipfile.ZipFile(zpath) as zf:
        names = set(zf.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
        config = json.loads(zf.read("config.json"))
    assert {"setup.sh", "run_autograder", "config.json", "variant.key", "inferlab-src/pyproject.toml",
            "inferlab-src/lib/inferlab/exercises/grade.py", "inferlab-src/data/models.toml"} <= names
    assert modes["run_autograder"] == modes["setup.sh"] == 0o755 and modes["variant.key"] == 0o600
    assert config == {"assignment": "hw1", "exercises": IDS}
    assert not [n for n in names if "__pycache__" in n]


@pytest.fixture(scope="module")
def autograded(tmp_path_factory):
    if not sb.available():
        pytest.skip(f"no sandbox: {sb.unavailable_reason()}")
    base = tmp_path_factory.mktemp("gradescope")
    zpath = build_bundle(IDS, base / "autograder.zip", assignment="hw1", key=KEY)
    root = base / "autograder"
    with zipfile.ZipFile(zpath) as zf:
        zf.extractall(root / "source")
    for name in ("run_autograder", "setup.sh"):
        (root / "source" / name).chmod(0o755)
    (root / "source" / "variant.key").chmod(0o600)
    assert subprocess.run(["bash", "-n", str(root / "source" / "setup.sh")]).returncode == 0
    p = variant("15.1.2-ex1", "s07", "hw1", key=KEY).params
    layers, kv_heads, head_dim = ARCH[p["model"]]
    right = 2 * layers * kv_heads * head_dim * p["seq_len"] * 2 / 1e9
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (
        "from inferlab.exercises import check", f"ex1 = {right!r}", 'check("15.1.2-ex1", ex1)',
        "ex2 = (16\n", 'check("15.1.2-ex2", ex2)')])
    (root / "submission").mkdir(parents=True)
    nbformat.write(nb, root / "submission" / "decode.ipynb")
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"sid": "s07", "email": "s07@x.edu"}]}))
    env = dict(os.environ, INFERLAB_AUTOGRADER_ROOT=str(root), INFERLAB_AUTOGRADER_PYTHON=sys.executable)
    proc = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text())


def test_results_json_follows_gradescope_s_schema(autograded):
    r = autograded
    assert set(r) >= {"score", "tests"} and isinstance(r["score"], (int, float))
    assert r.get("visibility", "visible") in ("hidden", "after_due_date", "after_published", "visible")
    for t in r["tests"]:
        assert set(t) >= {"name", "score", "max_score", "output", "visibility"}
        assert isinstance(t["score"], (int, float)) and 0 <= t["score"] <= t["max_score"]
    assert [t["name"].split(":")[0] for t in r["tests"]] == IDS
    assert sum(t["max_score"] for t in r["tests"]) == sum(get(e).points for e in IDS)


def test_the_student_s_own_variant_is_graded_and_failures_are_named(autograded):
    tests = {t["name"].split(":")[0]: t for t in autograded["tests"]}
    assert tests["15.1.2-ex1"]["score"] == 1 and autograded["score"] == 1
    assert "cell 4 raised SyntaxError at line 1" in tests["15.1.2-ex2"]["output"], tests["15.1.2-ex2"]
    assert tests["15.1.2-ex3"]["output"] == "the notebook has no check cell for this exercise"


# Exercises written as data travel in the bundle ------------------------------------------------------------

FIXTURE = ROOT / "tests" / "data" / "exercise_as_data.toml"
# layers, n_kv_heads, head_dim, parameters (the models' configuration files), as in test_exercises_data.py
DATA_ARCH = {"llama-3-8b": (32, 8, 128, 8_030_261_248), "mistral-7b": (32, 8, 128, 7_241_732_096),
             "llama-2-7b": (32, 32, 128, 6_738_415_616), "llama-2-13b": (40, 40, 128, 13_015_864_320)}


def cli(*args):
    env = {k: v for k, v in os.environ.items() if k != "INFERLAB_EXERCISES"}
    return subprocess.run([sys.executable, "-m", "inferlab.exercises", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, env=env)


@pytest.fixture
def with_data_exercise(tmp_path):
    """The instructor notebook of 15.1.2 with the fixture's data exercise (15.1.2-ex6), and the key file."""
    from inferlab.exercises.cells import JUPYTEXT_HEADER
    import jupytext
    cells = cli("cells", "15.1.2", "--exercises", FIXTURE)
    assert cells.returncode == 0, cells.stderr
    nbformat.write(jupytext.reads(JUPYTEXT_HEADER + cells.stdout, fmt="py:percent"), tmp_path / "hw.ipynb")
    (tmp_path / "variant.key").write_text(KEY.hex() + "\n")
    (tmp_path / "variant.key").chmod(0o600)
    return tmp_path


def test_a_bundle_whose_notebook_checks_a_data_exercise_without_its_file_is_refused(with_data_exercise):
    t = with_data_exercise
    built = cli("gradescope", t / "hw.ipynb", "--assignment", "hw1", "--key", t / "variant.key", "--out",
                t / "autograder.zip")
    assert built.returncode == 2 and not (t / "autograder.zip").exists()
    assert "15.1.2-ex6" in built.stderr and "--exercises" in built.stderr, built.stderr


def test_a_registered_data_exercise_whose_file_the_bundle_would_not_hold_is_refused(tmp_path, register_exercises):
    register_exercises(FIXTURE)  # as INFERLAB_EXERCISES would: known here, but not in the zip
    with pytest.raises(ValueError, match=r"15\.1\.2-ex6.*--exercises"):
        build_bundle(IDS + ["15.1.2-ex6"], tmp_path / "autograder.zip", assignment="hw1", key=KEY)
    assert not (tmp_path / "autograder.zip").exists()


@pytest.mark.skipif(not sb.available(), reason="no sandbox: bubblewrap is missing or does not start")
def test_a_data_exercise_is_bundled_registered_and_graded_in_gradescope_s_layout(with_data_exercise,
                                                                                register_exercises):
    t = with_data_exercise
    built = cli("gradescope", t / "hw.ipynb", "--assignment", "hw1", "--key", t / "variant.key", "--out",
                t / "autograder.zip", "--exercises", FIXTURE)
    assert built.returncode == 0, built.stderr
    root = t / "autograder"
    with zipfile.ZipFile(t / "autograder.zip") as zf:
        zf.extractall(root / "source")
    (root / "source" / "run_autograder").chmod(0o755)
    register_exercises(FIXTURE)  # in this process only: run_autograder must register it from the zip
    p = {"model": "llama-3-8b", "seq_len": 4096, **variant("15.1.2-ex6", "s07", "hw1", key=KEY).params}
    layers, kv_heads, head_dim, n_params = DATA_ARCH[p["model"]]
    right = {"weights_gb": 2 * n_params / 1e9, "kv_gb": 2 * layers * kv_heads * head_dim * p["seq_len"] * 2 / 1e9}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (
        "from inferlab.exercises import check", f"ex6 = {right!r}", 'check("15.1.2-ex6", ex6)')])
    (root / "submission").mkdir(parents=True)
    nbformat.write(nb, root / "submission" / "hw.ipynb")
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"sid": "s07"}]}))
    env = {k: v for k, v in os.environ.items() if k != "INFERLAB_EXERCISES"}
    env.update(INFERLAB_AUTOGRADER_ROOT=str(root), INFERLAB_AUTOGRADER_PYTHON=sys.executable)
    proc = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tests = {t["name"].split(":")[0]: t for t in json.loads((root / "results" / "results.json").read_text())["tests"]}
    assert tests["15.1.2-ex6"]["score"] == tests["15.1.2-ex6"]["max_score"] == 2, tests.get("15.1.2-ex6")
