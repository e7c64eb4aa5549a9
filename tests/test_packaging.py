"""Packaging: environment.yml installs what pyproject.toml declares; the console script exists."""
import re
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def environment_pip_requirements() -> list[str]:
    """The entries under `- pip:` in environment.yml (a plain line reader: no YAML library needed)."""
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    indent = len(lines[start]) - len(lines[start].lstrip())
    out = []
    for line in lines[start + 1:]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if len(line) - len(line.lstrip()) <= indent:
            break
        out.append(line.strip().removeprefix("- ").strip())
    return out


def normalise(requirement: str) -> str:
    return re.sub(r"\s+", "", requirement).lower()


def test_environment_pip_deps_equal_pyproject_deps_plus_dev_book_and_engines():
    project = pyproject()["project"]
    extras = project["optional-dependencies"]
    declared = project["dependencies"] + extras["dev"] + extras["book"] + extras["engines"]
    pip = [r for r in environment_pip_requirements() if not r.startswith("-e")]
    assert sorted(map(normalise, pip)) == sorted(map(normalise, declared))
    assert len(set(map(normalise, pip))) == len(pip), "duplicate entries in environment.yml"


def test_environment_installs_the_package_and_matching_python():
    assert "-e ." in environment_pip_requirements()
    text = (ROOT / "environment.yml").read_text()
    env_python = re.search(r"^\s*-\s*python\s*=\s*([\d.]+)", text, re.M).group(1)
    minimum = re.fullmatch(r">=\s*([\d.]+)", pyproject()["project"]["requires-python"]).group(1)
    assert tuple(map(int, env_python.split("."))) >= tuple(map(int, minimum.split(".")))


def test_console_script_is_declared_and_resolves():
    assert pyproject()["project"]["scripts"] == {"inferlab": "inferlab.cli:main"}
    scripts = {ep.name: ep for ep in entry_points(group="console_scripts")}
    assert "inferlab" in scripts, "reinstall with pip install -e '.[dev]'"
    from inferlab.cli import main
    assert scripts["inferlab"].load() is main


def test_makefile_bench_target_exists():
    assert "benchmarks/sweep_vectorised.py" in (ROOT / "Makefile").read_text()
    assert (ROOT / "benchmarks" / "sweep_vectorised.py").is_file()


def test_make_installs_every_extra_the_tests_need():
    """`make test` tests the transformers engine: the Makefile's install line has the engines extra,
    which pins the version the adapter was read from."""
    make = (ROOT / "Makefile").read_text()
    assert re.search(r'pip install -q -e "\.\[dev,book,engines\]"', make)
    assert pyproject()["project"]["optional-dependencies"]["engines"] == ["transformers==5.24.0"]
