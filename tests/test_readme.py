"""The front page: short, every output on it regenerated, every link to a page that exists.

README.md shows the real output of `inferlab estimate`, `verify`, `serve` and the repeatability
benchmark, and two generated tables (verdict counts; the simulator against transformers): they are
regenerated here (tools/readme_outputs.py) and must equal what the page prints.
"""
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def tool():
    spec = importlib.util.spec_from_file_location("readme_outputs", ROOT / "tools" / "readme_outputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pages():
    return [README, *sorted(DOCS.glob("*.md"))]


def test_the_front_page_is_at_most_250_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_the_generated_pages_are_the_front_page_and_the_cli_reference():
    readme = tool()
    assert readme.PAGES == (README, DOCS / "cli.md", DOCS / "vllm.md", DOCS / "kernels.md")
    text = README.read_text(encoding="utf-8")
    assert text.count("```console") >= 4 and text.count("<!-- generated: ") == 3
    assert (DOCS / "cli.md").read_text(encoding="utf-8").count("<!-- generated: subcommands -->") == 1
    kernels = (DOCS / "kernels.md").read_text(encoding="utf-8")
    assert kernels.count("<!-- generated: kernel-fit-errors -->") == kernels.count("<!-- generated: kernel-fit-numbers -->") == 1
    vllm = (DOCS / "vllm.md").read_text(encoding="utf-8")
    assert vllm.count("<!-- generated: vllm-development -->") == vllm.count("<!-- generated: vllm-shared-host -->") == 1


@pytest.mark.parametrize("page", [README, DOCS / "cli.md", DOCS / "vllm.md"], ids=lambda p: p.name)
def test_every_output_on_the_page_is_what_the_commands_print_now(page):
    text = page.read_text(encoding="utf-8")
    regenerated = tool().render(text)
    if regenerated != text:
        import difflib
        diff = "".join(list(difflib.unified_diff(text.splitlines(True), regenerated.splitlines(True),
                                                 page.name, "regenerated"))[:60])
        pytest.fail(f"{page.name} is stale: run `make readme`\n" + diff)


def test_the_front_page_figure_is_the_one_inferlab_draws_now(tmp_path):
    readme = tool()
    name, target = readme.FIGURE
    assert f"]({target.relative_to(ROOT)})" in README.read_text(encoding="utf-8")
    readme.run([".venv/bin/inferlab", "figures", "--only", name, "--format", "png", "--out", str(tmp_path)])
    assert (tmp_path / f"{name}.png").read_bytes() == target.read_bytes(), "run `make readme`"


def test_the_regenerator_replaces_a_typed_output():
    readme = tool()
    typed = "```console\n$ .venv/bin/inferlab estimate --model llama-2-13b-book --gpu h100-sxm --batch 1\nmade up\n```\n"
    out = readme.render(typed)
    assert "made up" not in out and "ridge point 295 FLOP/byte" in out
    with pytest.raises(ValueError, match="unknown generated region"):
        readme.render("<!-- generated: nothing -->\n<!-- end generated -->")
    with pytest.raises(ValueError, match="console lines run one of"):
        readme.render("```console\n$ rm -rf /\n```\n")


def test_the_python_on_the_front_page_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_every_relative_link_names_a_file_that_exists(page):
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        assert (page.parent / target.split("#", 1)[0]).exists(), f"{page.name}: {target}"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_each_reference_page_has_a_title_and_the_front_page_links_it(page):
    assert page.read_text(encoding="utf-8").startswith("# ")
    assert f"](docs/{page.name})" in README.read_text(encoding="utf-8")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
