"""The book build (book/convert.py, book/build.py) on a small fixture that uses every markup
convention of book/README.md: the converter's output, then the HTML Sphinx makes of it.

The fixture is written here (two notebooks and an errata file in tmp_path), so these tests do not
depend on what the chapter notebooks currently contain. The real book is tested in a browser by
tests/browser/ (`make test-browser`).
"""
from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book"))
import convert  # noqa: E402  (book/convert.py)


def load_build():
    """book/build.py, loaded by path (the name `build` is also a PyPI package's)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("inferlab_book_build", ROOT / "book" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

# A 1x1 PNG (the smallest image a figure cell can produce).
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0000003010100c9fe92ef0000000049454e44ae426082")).decode()
ALT = "A single grey dot on a white background, standing in for a roofline plot."
WIDE_LINE = "x" * 190


def md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text: str, outputs=()) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": text,
            "outputs": list(outputs)}


def stream(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text}


def image() -> dict:
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": PNG, "text/plain": "<Figure size 10x10>"}}


def markdown_out(text: str) -> dict:
    return {"output_type": "execute_result", "metadata": {}, "execution_count": 1,
            "data": {"text/markdown": text, "text/plain": "<IPython.core.display.Markdown object>"}}


VERDICT = "Verdict of the fixture run: the measured line sits 4.2x above the dashed prediction."


def notebook(cells: list[dict]) -> dict:
    cells = [dict(c, id=f"cell-{i}") for i, c in enumerate(cells)]
    return {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                         "language_info": {"name": "python"}}}


FIGURE_CELL = ("# figure: fig-15-9-9-dot\n# caption: The dot shows where the fixture's roofline would be.\n"
               f"# alt: {ALT}\nfig = draw()\nfig")
CHAPTER_CELLS = [
    md("# 15.9.9 Fixture chapter\n\nIntro with inline math $I = F/Q$ and the **fixture term** it defines."),
    md("## Key equation\n\n<!-- equation: eq-roofline -->\n$$\n\\min(\\text{peak}, I \\cdot \\text{BW})\n$$\n\n"
       "As [Eq. (roofline)](#eq-roofline) says, and [Figure](#fig-15-9-9-dot) shows; see "
       "[Williams et al. 2009](../book/references.md#williams2009), the "
       "[TTFT section](15_9_8_second.ipynb#time-to-first-token), the [errata](../ERRATA.md#1599-a) "
       "and the [index](00_index.ipynb)."),
    code(FIGURE_CELL, [stream("table of the points\n"), image(), markdown_out(VERDICT)]),
    md("> **Erratum 15.9.9-a.** The book says 160 ms;\n> its own inputs give 54 ms.\n\nAfter the box."),
    code("show_claims()", [{"output_type": "display_data", "metadata": {}, "data": {
        "text/html": '<table><tr id="claim-15.9.9-a"><td>15.9.9-a</td><td>erratum</td></tr></table>',
        "text/plain": "15.9.9-a erratum"}}]),
    code("print(wide)", [stream(WIDE_LINE + "\n")]),
    code("worked_examples.takeaway(...)", [markdown_out("> **Takeaway.** Prefill of the fixture is compute-bound.")]),
    md("## Exercises\n\nCompute it."),
    code("# SOLUTION\nex1 = 42", []),
    md("<!-- SOLUTION -->\nThe answer is **42** because $6 \\times 7 = 42$."),
    code('check("15.1.1-ex1", ex1);', [stream("15.1.1-ex1 PASS  1/1 point\n")]),
    md(convert.AUDIT_HEADING + "\nThe book's numbers beside ours."),
    code('print(verdict_summary("15.9.9"))',
         [stream("15.9.9: 5 claims: 3 consistent, 1 erratum, 1 unchecked\n")]),
    md("### Measure it here\n\nTimed live."),
    code("print(audit)", [stream("AUDIT-TABLE-ROW 15.9.9-b\n")]),
]
SECOND_CELLS = [
    md("# 15.9.8 Second\n\n## Time to first token\n\nBack to the [first](15_9_9_fixture.ipynb).\n\n"
       "<!-- equation: eq-second -->\n$$\nt = F / \\text{peak}\n$$\n\nBy [Eq. (second)](#eq-second)."),
    code(FIGURE_CELL.replace("fig-15-9-9-dot", "fig-15-9-8-dot"), [image()]),
]
INDEX_CELLS = [md("# Fixture index\n\n[First](15_9_9_fixture.ipynb), [second](15_9_8_second.ipynb), "
                  "[errata](../ERRATA.md).")]
ERRATA = "# Errata\n\n## Errata\n\n| id |\n|---|\n| [15.9.9-a](#1599-a) |\n\n### 15.9.9-a\n\nThe details.\n"


FIXTURE_PY = "# %% [markdown]\n# # 15.9.9 Fixture chapter\n"


DOCS_PAGE = ("# Fixture guide\n\nRead the [first chapter](../chapters/15_9_9_fixture.ipynb#key-equation), the "
             "[notation](../book/notation.md), the [other page](other.md) and [a data file](../data/claims.toml).\n\n"
             "### A heading two levels down\n\nDOCS-GUIDE-BODY\n")
OTHER_DOCS_PAGE = "# Another reference page\n\nBack to the [guide](guide.md).\n\n![a one-pixel figure](img/dot.png)\n"


def one_pixel_png() -> bytes:
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x80")) + chunk(b"IEND", b""))


def write_fixture(base: Path, extra_chapter_cells=()) -> Path:
    chapters = base / "chapters"
    chapters.mkdir(parents=True)
    for name, cells in (("00_index", INDEX_CELLS), ("15_9_9_fixture", CHAPTER_CELLS + list(extra_chapter_cells)),
                        ("15_9_8_second", SECOND_CELLS)):
        (chapters / f"{name}.ipynb").write_text(json.dumps(notebook(cells)))
    (chapters / "15_9_9_fixture.py").write_text(FIXTURE_PY)
    (base / "ERRATA.md").write_text(ERRATA)
    (base / "docs").mkdir()
    (base / "docs" / "guide.md").write_text(DOCS_PAGE)
    (base / "docs" / "other.md").write_text(OTHER_DOCS_PAGE)
    (base / "docs" / "img").mkdir()
    (base / "docs" / "img" / "dot.png").write_bytes(one_pixel_png())
    return base


# ------------------------------------------------------------------ the converter, cell by cell
def test_labelled_equation_becomes_a_numbered_math_block():
    out = convert.convert_equations("Text\n<!-- equation: eq-kv -->\n$$\nC = 2 L d\n$$\nMore")
    assert out == "Text\n```{math}\n:label: eq-kv\n\nC = 2 L d\n```\nMore"
    # the notebooks' inline-delimited form, with the punctuation kept after the block
    out = convert.convert_equations("<!-- equation: eq-a -->\n$$a = b,\n\\qquad c$$.")
    assert out == "```{math}\n:label: eq-a\n\na = b,\n\\qquad c\n```\n\n."
    assert convert.convert_equations("$$x$$ without a label") == "$$x$$ without a label"


@pytest.mark.parametrize("text,target,expected", [
    ("Figure", "#fig-15-1-1-roofline", "{numref}`Figure %s <fig-15-1-1-roofline>`"),
    ("the roofline plot", "#fig-x", "the roofline plot ({numref}`Figure %s <fig-x>`)"),
    ("Eq. (kv-per-token)", "#eq-kv-per-token", "Eq. {eq}`eq-kv-per-token`"),
    ("the KV formula", "#eq-kv", "the KV formula (Eq. {eq}`eq-kv`)"),
    ("Williams et al. 2009", "../book/references.md#williams2009", "{ref}`Williams et al. 2009 <williams2009>`"),
    ("errata", "../ERRATA.md", "[errata](errata.md)"),
    ("15.1.1-k", "../ERRATA.md#1511-k", "[15.1.1-k](errata.md#1511-k)"),
    ("index", "00_index.ipynb", "[index](index.ipynb)"),
    ("TTFT", "15_2_1_ttft_itl.ipynb#time-to-first-token", None),
    ("site", "https://example.org", None),
])
def test_links(text, target, expected):
    assert convert.convert_link(text, target) == expected


def test_image_links_and_plain_links_are_left_alone():
    text = "![logo](#fig-x) and [site](https://example.org)"
    assert convert.convert_links(text) == text


def test_erratum_blockquote_becomes_an_anchored_warning():
    out = convert.convert_errata_boxes("Before\n> **Erratum 15.1.1-k.** The book says\n> 160 ms.\n\nAfter")
    assert out.split("\n") == [
        "Before", "````{admonition} Erratum 15.1.1-k", ":class: warning erratum", "",
        '<span id="erratum-15.1.1-k"></span>The book says', "160 ms.", "````", "", "After"]
    plain = "> A quotation, not an erratum."
    assert convert.convert_errata_boxes(plain) == plain


def test_figure_cell_gets_caption_alt_and_name_and_loses_the_three_lines():
    cell = convert.convert_code_cell(code("# NBVAL_IGNORE_OUTPUT\n" + FIGURE_CELL, [image()]), "nb, cell 1")
    assert cell["metadata"]["mystnb"] == {
        "figure": {"name": "fig-15-9-9-dot", "caption": "The dot shows where the fixture's roofline would be."},
        "image": {"alt": ALT}}
    assert cell["source"] == "fig = draw()\nfig"          # the test runner's marker is not the reader's


@pytest.mark.parametrize("source,outputs,message", [
    ("# figure: fig-a\n# caption: c\nfig", [image()], "lacks '# alt"),
    ("# figure: Figure 1\n# caption: c\n# alt: a\nfig", [image()], "must look like fig-"),
    (FIGURE_CELL, [], "exactly one image, found 0"),
    (FIGURE_CELL, [image(), image()], "exactly one image, found 2"),
    ("fig", [image()], "no '# figure:/# caption:/# alt:' lines"),
])
def test_figure_convention_violations_are_named(source, outputs, message):
    with pytest.raises(convert.ConversionError, match=re.escape(message)) as e:
        convert.convert_code_cell(code(source, outputs), "15_9_9_fixture.ipynb, cell 3")
    assert "15_9_9_fixture.ipynb, cell 3" in str(e.value)


def test_solutions_are_collapsed():
    cell = convert.convert_code_cell(code("# SOLUTION\nex1 = 42"), "nb")
    assert "hide-cell" in cell["metadata"]["tags"]
    assert cell["metadata"]["mystnb"]["code_prompt_show"] == "Show solution"
    assert "hide-cell" not in convert.convert_code_cell(code("ex1 = None  # your answer"), "nb")["metadata"]["tags"]
    out = convert.convert_markdown("<!-- SOLUTION -->\nThe answer is 42.")
    assert out.startswith('<details class="solution">\n<summary>Show solution</summary>')
    assert "The answer is 42." in out and out.endswith("</details>")


@pytest.mark.parametrize("width,tag", [(100, None), (101, "text-width-120"), (177, "text-width-180"),
                                       (190, "text-width-200"), (1000, "text-width-300")])
def test_wide_text_outputs_are_tagged_by_width(width, tag):
    # 177 characters: the widest recorded-measurement table of the chapters; needs the 180 bucket
    assert convert.width_tag(width) == tag


def test_width_of_markdown_output_counts_only_its_fenced_blocks():
    prose = "A long sentence of prose that wraps in the browser. " * 5
    out = {"output_type": "execute_result", "metadata": {}, "execution_count": 1, "data": {
        "text/markdown": f"{prose}\n\n```text\n{'y' * 150}\n```\n", "text/plain": "z" * 400}}
    assert convert._text_width(code("show_formulas()", [out])) == 150


def test_converter_does_not_modify_its_input():
    nb = notebook(CHAPTER_CELLS)
    before = json.dumps(nb, sort_keys=True)
    convert.convert_notebook(nb, "15_9_9_fixture.ipynb")
    assert json.dumps(nb, sort_keys=True) == before


# ------------------------------------------------------------------ the fixture through Sphinx
@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pytest.importorskip("myst_nb", reason="the book extra is not installed (pip install -e '.[book]')")
    build = load_build()
    base = write_fixture(tmp_path_factory.mktemp("book"))
    chapters_before = {p.name: p.read_bytes() for p in (base / "chapters").iterdir()}
    rc = build.main(["--chapters", str(base / "chapters"), "--errata", str(base / "ERRATA.md"),
                     "--docs", str(base / "docs"),
                     "--src", str(base / "src"), "--out", str(base / "out"), "--no-mathjax"])
    assert rc == 0
    assert {p.name: p.read_bytes() for p in (base / "chapters").iterdir()} == chapters_before, \
        "the build wrote into the notebooks' folder"
    return base / "out"


def page(built: Path, name: str) -> str:
    return (built / f"{name}.html").read_text()


def test_fixture_pages_exist(built):
    assert {p.name for p in built.glob("*.html")} >= {
        "index.html", "15_9_9_fixture.html", "15_9_8_second.html", "errata.html", "references.html"}


def test_figure_is_numbered_with_caption_and_alt(built):
    html = page(built, "15_9_9_fixture")
    fig = re.search(r'<figure[^>]*id="fig-15-9-9-dot".*?</figure>', html, re.S)
    assert fig, "no figure with the convention's name as its id"
    assert f'alt="{ALT}"' in fig.group(0)
    assert re.search(r'<span class="caption-number">Figure 1 </span><span class="caption-text">'
                     r"The dot shows where the fixture.s roofline would be\.", fig.group(0))
    # the prose reference became a numbered link to it
    assert re.search(r'<a class="reference internal" href="#fig-15-9-9-dot"><span class="std std-numref">'
                     r"Figure 1</span></a>", html)
    assert "# caption:" not in html


def test_numbering_restarts_on_every_page(built):
    html = page(built, "15_9_8_second")
    assert re.search(r'<figure[^>]*id="fig-15-9-8-dot">.*?<span class="caption-number">Figure 1 </span>', html, re.S)
    assert re.search(r'id="equation-eq-second">\s*<span class="eqno">\(1\)', html)
    assert re.search(r'Eq. <a class="reference internal" href="#equation-eq-second">\(1\)</a>', html)


def test_equation_is_numbered_and_referenced(built):
    html = page(built, "15_9_9_fixture")
    assert re.search(r'<div class="math notranslate nohighlight" id="equation-eq-roofline">\s*'
                     r'<span class="eqno">\(1\)', html)
    assert re.search(r'Eq. <a class="reference internal" href="#equation-eq-roofline">\(1\)</a>', html)
    assert "<!-- equation" not in html


def test_erratum_callout_claim_row_and_errata_link(built):
    html = page(built, "15_9_9_fixture")
    box = re.search(r'<div class="(?=[^"]*\bwarning\b)(?=[^"]*\badmonition\b)[^"]*\berratum\b[^"]*">.*?</div>',
                    html, re.S)
    assert box and '<p class="admonition-title">Erratum 15.9.9-a</p>' in box.group(0)
    assert "<blockquote" not in html
    assert '<span id="erratum-15.9.9-a"></span>' in box.group(0) and "its own inputs give 54 ms" in box.group(0)
    assert '<tr id="claim-15.9.9-a">' in html
    link = re.search(r'href="errata.html#([^"]+)"', html)
    assert link and f'id="{link.group(1)}"' in page(built, "errata")


def test_citation_and_cross_links_resolve(built):
    html = page(built, "15_9_9_fixture")
    assert re.search(r'href="references.html#williams2009"><span class="std std-ref">Williams et al. 2009', html)
    refs = page(built, "references")
    assert 'id="williams2009"' in refs and 'id="datasheets"' in refs
    assert "h100-sxm" in refs, "the datasheet list from data/accelerators.toml is missing"
    link = re.search(r'href="15_9_8_second.html#([^"]+)"', html)
    assert link and f'id="{link.group(1)}"' in page(built, "15_9_8_second")
    assert 'href="index.html"' in html


def test_every_output_of_the_fixture_reaches_its_page(built):
    """The executed notebook's outputs against the built HTML (book/output_check.py), per page."""
    import output_check
    for name, cells in (("15_9_9_fixture", CHAPTER_CELLS), ("15_9_8_second", SECOND_CELLS), ("index", INDEX_CELLS)):
        assert output_check.missing_outputs(notebook(cells), built / f"{name}.html") == [], name
    html = page(built, "15_9_9_fixture")
    assert html.index("table of the points") < html.index('id="fig-15-9-9-dot"') < html.index("Verdict of the fixture")


def test_the_output_check_reports_a_dropped_output(built):
    """The same page with the verdict sentence cut out, and with two outputs swapped: both reported
    (written next to the page, so that its images resolve; removed afterwards)."""
    import output_check
    html = page(built, "15_9_9_fixture")
    dropped, swapped = built / "test-dropped.html", built / "test-swapped.html"
    try:
        _check_reports(output_check, html, dropped, swapped)
    finally:
        dropped.unlink(missing_ok=True)
        swapped.unlink(missing_ok=True)


def _check_reports(output_check, html, dropped, swapped):
    dropped.write_text(html.replace("the measured line sits", "the line"))
    assert [m.split(":")[0] for m in output_check.missing_outputs(notebook(CHAPTER_CELLS), dropped)] == \
        ["cell 3 (text/markdown) missing"]
    swapped.write_text(html.replace("table of the points", "moved").replace("Verdict of", "table of the points Verdict of"))
    assert any("out of order" in m for m in output_check.missing_outputs(notebook(CHAPTER_CELLS), swapped))


def test_exercise_check_shows_a_folded_hint_not_pass(built):
    """The stored PASS means nothing to a reader who has not run the check: a folded hint instead,
    from the exercise's own hints and recognised slips (never its expected value)."""
    html = page(built, "15_9_9_fixture")
    assert "PASS  1/1" not in html and "1/1 point" not in html
    hint = re.search(r'<details class="hint">\s*<summary>Hint \(15\.1\.1-ex1\)</summary>(.*?)</details>', html, re.S)
    assert hint and "training rule" in hint.group(1), "the slips of 15.1.1-ex1 are missing from its hint"
    from inferlab import exercises
    expected = exercises.get("15.1.1-ex1").expected()["ttft_ms"]
    assert f"{expected:.3g}" not in hint.group(1) and f"{expected:.2f}" not in hint.group(1)


def test_an_unknown_exercise_in_a_check_cell_is_named():
    with pytest.raises(convert.ConversionError, match="15.9.9-ex7"):
        convert.convert_code_cell(code('check("15.9.9-ex7", ex7)'), "nb")
    assert convert.exercise_check_id("from inferlab.exercises import check") is None
    assert convert.exercise_check_id('# NBVAL_IGNORE_OUTPUT\ncheck("15.2.1-ex2", ex2);') == "15.2.1-ex2"


def test_reader_note_offers_the_notebook_and_its_source_and_links_notation(built):
    """Under the title of each notebook page: download buttons whose files are the chapter's own
    .ipynb and .py, the `make lab` note, and a link to the notation page (which the book has)."""
    base = built.parent
    html = page(built, "15_9_9_fixture")
    assert html.index("Fixture chapter") < html.index("reader-note") < html.index("Intro with inline math")
    links = dict((Path(h).suffix, h) for h in re.findall(r'<a class="reference download internal"[^>]*href="([^"]+)"', html))
    assert set(links) == {".ipynb", ".py"}
    assert (built / links[".ipynb"]).read_bytes() == (base / "chapters" / "15_9_9_fixture.ipynb").read_bytes()
    assert (built / links[".py"]).read_bytes() == FIXTURE_PY.encode()
    assert "run make lab" in re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).lower()
    assert 'href="notation.html"' in html
    second = page(built, "15_9_8_second")
    assert re.findall(r'class="reference download internal"[^>]*href="[^"]+\.ipynb"', second), "no .py: the .ipynb alone"
    assert 'id="notation"' in page(built, "notation") and "$C_\\text{kv}$" not in page(built, "notation")


def test_solutions_hidden_and_wide_output_tagged(built):
    html = page(built, "15_9_9_fixture")
    assert re.search(r'<div class="cell tag_hide-cell[^"]*"', html)
    assert "Show solution" in html
    assert re.search(r'<details class="solution">\s*<summary>Show solution</summary>', html)
    assert re.search(r'<div class="cell tag_text-width-200[^"]*"', html)
    css = (built / "_static" / "text-widths.css").read_text()
    rule = re.search(r"\.tag_text-width-200 div\.cell_output pre \{ font-size: clamp\((\d+)px,", css)
    assert rule and int(rule.group(1)) == 11, "a wide output must not shrink under 11 px"


def test_a_broken_figure_reference_fails_the_build(tmp_path):
    pytest.importorskip("myst_nb", reason="the book extra is not installed (pip install -e '.[book]')")
    build = load_build()
    base = write_fixture(tmp_path, [md("See [Figure](#fig-15-9-9-missing).")])
    rc = build.main(["--chapters", str(base / "chapters"), "--errata", str(base / "ERRATA.md"),
                     "--src", str(base / "src"), "--out", str(base / "out"), "--no-mathjax"])
    assert rc != 0


# ------------------------------------------------------------------ the bundled MathJax
def test_a_cached_mathjax_tarball_that_does_not_match_the_pinned_sha512_is_refused(tmp_path):
    build = load_build()
    bad = tmp_path / f"mathjax-{build.MATHJAX_VERSION}.tgz"
    bad.write_bytes(b"not the tarball")
    with pytest.raises(SystemExit, match="does not match its pinned sha512"):
        build.mathjax_tarball(tmp_path)
    assert not bad.exists(), "the bad file must not stay in the cache"


def test_unpack_mathjax_keeps_the_loaded_component_and_its_fonts_only(tmp_path):
    import io
    import tarfile
    build = load_build()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in ("package/es5/tex-mml-chtml.js", "package/es5/output/chtml/fonts/woff-v2/a.woff",
                     "package/es5/tex-svg-full.js", "package/README.md"):
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))
    n = build.unpack_mathjax(buf.getvalue(), tmp_path / "mathjax")
    files = sorted(str(p.relative_to(tmp_path / "mathjax")) for p in (tmp_path / "mathjax").rglob("*") if p.is_file())
    assert n == 2 and files == ["output/chtml/fonts/woff-v2/a.woff", "tex-mml-chtml.js"]


def test_a_figure_cell_with_a_sentence_under_its_image_is_split_and_widget_views_dropped():
    """myst-nb names every output of a figure cell after the figure (duplicate targets): the image
    stays in the figure cell, the rest moves to an input-less cell; live widget views are dropped.
    The carrier cell's source is not blank: myst-nb skips a blank cell, outputs and all (the live
    runs' verdicts and error tables were lost that way)."""
    sentence = {"output_type": "display_data", "metadata": {},
                "data": {"text/markdown": "See the [errata](../ERRATA.md#x).", "text/plain": "<md>"}}
    widget = {"output_type": "display_data", "metadata": {},
              "data": {"application/vnd.jupyter.widget-view+json": {"model_id": "m"}, "text/plain": "HBox()"}}
    cell = convert.convert_code_cell(code(FIGURE_CELL, [image(), widget, sentence]), "nb, cell 1")
    figure, rest = convert.split_figure_cell(cell)
    assert figure["outputs"] == [image()] and "figure" in figure["metadata"]["mystnb"]
    assert rest["source"].strip() and rest["metadata"]["tags"] == ["remove-input"]
    assert "figure" not in rest["metadata"].get("mystnb", {})
    assert [o["data"]["text/markdown"] for o in rest["outputs"]] == ["See the [errata](errata.md#x)."]
    assert convert.split_figure_cell(convert.convert_code_cell(code(FIGURE_CELL, [image()]), "nb")) \
        == [convert.convert_code_cell(code(FIGURE_CELL, [image()]), "nb")]


def test_outputs_before_and_after_a_figure_keep_their_order():
    """A table printed before the image stays with the code, above the figure; a sentence after it
    comes after; only the figure cell carries the figure's name; each piece gets its own width tag."""
    table = stream("w" * 150 + "\n")
    cell = convert.convert_code_cell(code(FIGURE_CELL, [table, image(), markdown_out(VERDICT)]), "nb")
    pieces = convert.split_figure_cell(cell)
    assert [p["outputs"] for p in pieces] == [[table], [image()], [markdown_out(VERDICT)]]
    assert pieces[0]["source"] == cell["source"] and "mystnb" not in pieces[0]["metadata"]
    assert pieces[0]["metadata"]["tags"] == ["text-width-160"]
    assert pieces[1]["metadata"]["mystnb"]["figure"]["name"] == "fig-15-9-9-dot"
    assert all(p["source"].strip() for p in pieces)
    assert pieces[1]["metadata"]["tags"] == ["remove-input"] == pieces[2]["metadata"]["tags"]


def test_html_table_cells_are_labelled_with_their_column_header():
    """Any header row, any number of columns: a stacked phone layout shows each value's column."""
    table = ('<table class="t"><thead><tr><th style="a">claim</th><th></th><th>ours &amp; band</th></tr></thead>'
             '<tbody><tr id="claim-x"><td style="b">x</td><td>desc</td><td>5</td></tr>'
             '<tr><td>y</td><td>d2</td><td>6</td></tr></tbody></table><table><tr><td>no header</td></tr></table>')
    out = convert.label_table_cells(table)
    assert re.findall(r'<td[^>]*data-label="([^"]*)"', out) == ["claim", "", "ours &amp; band"] * 2
    assert '<td style="b"' not in out and 'data-label="claim" style="b"' in out
    assert out.endswith("<table><tr><td>no header</td></tr></table>")
    assert convert.label_table_cells(out) == out, "labelling twice must not add a second attribute"


def test_a_claims_tables_links_to_the_errata_page_reach_its_sections_in_the_book():
    """The reasons under a claims table are ERRATA.md's sections, one link away (issue 39: a short
    audit); in the book those links go to the errata page's sections, which exist there."""
    from inferlab.notebook import reader
    table = reader.claims_table("15.2.2")._repr_html_()
    out = {"output_type": "display_data", "metadata": {}, "data": {"text/html": table, "text/plain": "t"}}
    cell = convert.convert_code_cell(code('reader.claims("15.2.2")', [out]), "nb")
    hrefs = re.findall(r'href="([^"]*)"', cell["outputs"][0]["data"]["text/html"])
    assert len(hrefs) == 3, hrefs   # 15.2.2 has approximations, unchecked claims and widened bands
    headings = re.findall(r"^## (.+)$", (ROOT / "ERRATA.md").read_text(encoding="utf-8"), re.M)
    slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
    for h in hrefs:
        page, _, anchor = h.partition("#")
        assert page == "errata.html" and anchor in slugs, h


def test_a_folded_html_table_counts_towards_the_output_width():
    """A wide table inside an HTML <details><pre> block (reader.details) gets the font-scaling tag too."""
    wide = "x" * 150
    folded = {"output_type": "display_data", "metadata": {},
              "data": {"text/html": f"<details><summary>s</summary><pre>{wide}&amp;</pre></details>",
                       "text/plain": "s"}}
    cell = convert.convert_code_cell(code("show()", [folded]), "nb")
    assert "text-width-160" in cell["metadata"]["tags"]


def test_figure_alt_text_is_what_the_figure_draws_when_the_image_says_so():
    """The PNG's "alt" metadata (inferlab.notebook.alttext.describe, written when the figure was drawn) wins
    over the cell's hand-written `# alt:` line, which can drift from the figure."""
    described = dict(image(), metadata={"image/png": {"width": 672, "alt": "Line plot of y against x (4 lines)."}})
    cell = convert.convert_code_cell(code(FIGURE_CELL, [described]), "nb")
    assert cell["metadata"]["mystnb"]["image"]["alt"] == "Line plot of y against x (4 lines)."
    cell = convert.convert_code_cell(code(FIGURE_CELL, [image()]), "nb")
    assert cell["metadata"]["mystnb"]["image"]["alt"] == ALT


def test_worked_cells_fold_their_code():
    cell = convert.convert_code_cell(code("worked_examples.equation(r'x = <x>', x=1.0)", [markdown_out("$$x = 1$$")]), "nb")
    assert "hide-input" in cell["metadata"]["tags"]
    assert "hide-input" not in convert.convert_code_cell(code("print(1)", [stream("1\n")]), "nb")["metadata"]["tags"]
    # a library equation worked out (inferlab.notebook.equations) and the serving lab's older name fold too
    for source in ("ridge = equations.ROOFLINE.worked(peak=1e15, bw=3e12)", "worked.takeaway('x')"):
        assert "hide-input" in convert.convert_code_cell(code(source, [markdown_out("$$x$$")]), "nb")["metadata"]["tags"]


def test_cells_that_write_prose_fold_their_code_and_test_markers_never_show():
    prose = convert.convert_code_cell(code("b = 2\nMarkdown(f'Two is {b}.')", [markdown_out("Two is 2.")]), "nb")
    assert "hide-input" in prose["metadata"]["tags"]
    mixed = convert.convert_code_cell(code("print(1)\nMarkdown('x')", [stream("1\n"), markdown_out("x")]), "nb")
    assert "hide-input" not in mixed["metadata"]["tags"]            # a printed table stays in view with its code
    live = convert.convert_code_cell(code("# NBVAL_IGNORE_OUTPUT\nrun = measure()\nrun", [stream("1\n")]), "nb")
    assert live["source"] == "run = measure()\nrun" and "NBVAL" not in live["source"]


def test_a_drills_answer_shows_only_its_fold():
    cell = convert.convert_code_cell(code("interview.answer('15.2.2', 3, MODEL, GPU, PREC)",
                                          [markdown_out("<details class=\"interview-answer\">x</details>")]), "nb")
    assert "remove-input" in cell["metadata"]["tags"] and "hide-input" not in cell["metadata"]["tags"]


def test_what_applies_in_jupyterlab_only_gives_way_to_what_the_web_page_says():
    text = ("## Try it\n<!-- lab -->Move the controls: the curve follows.<!-- /lab -->"
            "<!-- web: In JupyterLab the panel has controls; here it is drawn in its default state. -->")
    out = convert.convert_markdown(text)
    assert "Move the controls" not in out and "<!--" not in out
    assert out == "## Try it\nIn JupyterLab the panel has controls; here it is drawn in its default state."


def test_an_interview_answer_cell_becomes_a_your_answer_box():
    out = convert.convert_markdown("<!-- YOUR ANSWER -->\n**Your answer.** <!-- lab -->Double-click here.<!-- /lab -->"
                                   "<!-- web: Answer aloud first. -->")
    assert out == "````{admonition} Your answer\n:class: your-answer\n\n**Your answer.** Answer aloud first.\n````"


def test_takeaway_blockquote_becomes_a_callout(built):
    assert convert.convert_takeaways("> **Takeaway.** One line\n> and two.\n\nAfter.") == \
        "````{admonition} Takeaway\n:class: tip takeaway\n\nOne line\nand two.\n````\n\nAfter."
    html = page(built, "15_9_9_fixture")
    box = re.search(r'<div class="tip takeaway admonition">\s*<p class="admonition-title">Takeaway</p>\s*'
                    r"<p>Prefill of the fixture is compute-bound\.</p>", html)
    assert box and "<blockquote" not in html


def test_code_lines_get_a_hanging_indent_of_their_own_indentation_plus_four():
    import postprocess
    page = ('<p>x</p><div class="highlight"><pre><span></span><span class="k">def</span> f():\n'
            '<span class="w">    </span><span class="k">return</span> 1\n'
            '\n'
            '\t&#160;y = 2\n</pre></div>')
    out = postprocess.hang_code_lines(page)
    lines = re.findall(r'<span class="code-line" style="--hang: (\d+)ch">(.*?)</span>(?=<span class="code-line"|</pre>)', out)
    # 4 source lines (the final newline ends the last one): indents 0, 4, 0, and a tab (4) + nbsp (not a space: 0 more)
    assert [int(h) for h, _ in lines] == [4, 8, 4, 8]
    assert "\n" not in out.split("<pre>")[1], "the blocks replace the newlines"
    assert lines[1][1] == '<span class="w">    </span><span class="k">return</span> 1'
    assert postprocess.hang_code_lines(out) == out
    assert out.startswith("<p>x</p>")


def test_a_figure_phone_variant_leaves_the_notebook_and_becomes_a_picture_source(tmp_path):
    """book/postprocess.py: the "narrow" PNG of an output's metadata goes to _static/narrow/<key>.png
    (out of the staged notebook), and the built page's <img> of the main PNG becomes a <picture>
    offering it below 720 px, with the figure's text size and the variant's width on the <img>."""
    import postprocess
    main_png = base64.b64decode(PNG)
    narrow_png = main_png + b"narrow"           # any other bytes: a different file
    out_cell = {"output_type": "display_data",
                "data": {"image/png": PNG, "text/plain": "points"},
                "metadata": {"image/png": {"width": 672, "alt": ALT, "text_px": 12.0,
                                           "narrow": {"png": base64.b64encode(narrow_png).decode(), "width": 345}}}}
    plain = {"output_type": "display_data", "data": {"image/png": PNG}, "metadata": {}}
    nb = {"cells": [{"cell_type": "code", "source": "", "outputs": [out_cell, plain]}]}
    static = tmp_path / "book" / "_static" / postprocess.NARROW_DIR
    assert postprocess.extract_narrow_images(nb, static) == 1
    key = postprocess.image_key(main_png)
    assert (static / f"{key}.png").read_bytes() == narrow_png
    assert "narrow" not in out_cell["metadata"]["image/png"] and out_cell["metadata"]["image/png"]["width"] == 672
    # the built page: Sphinx copied the main PNG to _images/ under its own name
    (tmp_path / "book" / "_images").mkdir()
    (tmp_path / "book" / "_images" / "abc.png").write_bytes(main_png)
    (tmp_path / "book" / "_images" / "other.png").write_bytes(b"\x89PNG other")
    page = ('<figure><img alt="a" src="_images/abc.png" width="672" /></figure>'
            '<figure><img alt="b" src="_images/other.png" width="100" /></figure>')
    html_out = postprocess.picture_figures(page, tmp_path / "book")
    assert html_out == (
        '<figure><picture><source media="(max-width: 720px)" '
        f'srcset="_static/narrow/{key}.png 2x" width="345">'
        '<img alt="a" src="_images/abc.png" width="672" data-text-px="12.0" data-narrow-width="345"></picture></figure>'
        '<figure><img alt="b" src="_images/other.png" width="100" /></figure>')
    assert postprocess.picture_figures(html_out, tmp_path / "book") == html_out


# ------------------------------------------------------------------ reference pages and the audit fold
def test_docs_pages_are_rendered_in_a_reference_part_after_the_chapters(built):
    guide = (built / "docs" / "guide.html").read_text()
    assert "Fixture guide" in guide and "DOCS-GUIDE-BODY" in guide
    assert 'href="../15_9_9_fixture.html#key-equation"' in guide
    assert 'href="../notation.html"' in guide and 'href="other.html"' in guide
    assert "a data file" in guide and "claims.toml" not in guide      # a repository file: its text only
    assert (built / "docs" / "other.html").is_file()
    # a page's image (docs/img/) is staged beside it: Sphinx, warnings as errors, would fail the build without it
    other = (built / "docs" / "other.html").read_text()
    img = re.search(r'<img alt="a one-pixel figure" src="([^"]+)"', other)
    assert img and (built / "docs" / img.group(1)).is_file(), other[-600:]
    index = page(built, "index")
    nav = index[index.index('class="bd-sidebar'):]
    assert "Reference" in nav and nav.index("15_9_9_fixture.html") < nav.index("docs/guide.html")


def test_a_docs_page_needs_a_title_and_gets_even_heading_levels():
    with pytest.raises(convert.ConversionError, match="docs/x.md.*title"):
        convert.convert_docs_page("Some text\n", "x.md", [], ["x.md"])
    out = convert.convert_docs_page("# T\n\n### jump\n\n```\n#### code, not a heading\n```\n", "x.md", [], ["x.md"])
    assert "\n## jump\n" in out and "#### code, not a heading" in out


def test_audit_counts_read_the_stored_verdict_summary():
    assert convert.audit_counts("15.1.2: 40 claims: 31 consistent, 2 approximation, 3 erratum, 4 unchecked\n") == \
        "40 numbers checked: 31 \u2713, 2 \u2248 approximations, 3 errata, 4 unchecked"
    with pytest.raises(convert.ConversionError, match="unknown verdict"):
        convert.audit_counts("15.1.2: 1 claims: 1 wrong")
    # a lab without claims of its own counts the chapter's statements it tests (statements.summary_line)
    assert convert.audit_counts("15.2.3: 11 statements: 5 consistent, 3 erratum, 2 depends, 1 unchecked\n") == \
        "11 statements checked: 5 \u2713, 3 errata, 2 depend on the setting, 1 unchecked"


def test_a_labs_audit_heading_counts_the_statements_its_closing_section_printed():
    def code(source, text):
        return {"cell_type": "code", "source": source, "outputs": [{"output_type": "stream", "text": text}]}
    cells = [{"cell_type": "markdown", "source": "## Checking the book's numbers\nIntro."},
             code("x = 1", "nothing\n"),
             code('print("15.2.3: " + statements.summary_line(v))', "15.2.3: 2 statements: 1 consistent, 1 erratum, "
                  "0 depends, 0 unchecked\n")]
    out = convert.count_audit_heading(cells)
    assert out[0]["source"].startswith("## Checking the book's numbers: 2 statements checked: 1 \u2713, 1 errata")
    assert out[0]["source"].endswith("\nIntro.")


def test_the_audit_section_is_folded_under_its_counted_heading(built):
    text = page(built, "15_9_9_fixture")
    m = re.search(r'<details class="audit"><summary><h2>(.*?)</h2></summary>(.*?)</details>', text, re.S)
    assert m, "no folded audit section"
    assert "Checking the book\u2019s numbers: 5 numbers checked: 3 \u2713, 1 errata, 1 unchecked" in \
        m.group(1).replace("&#8217;", "\u2019").replace("'", "\u2019")
    assert "AUDIT-TABLE-ROW" in m.group(2) and "Measure it here" in m.group(2)
    assert "Compute it." not in m.group(2)                  # the exercises stay outside the fold
    assert 'src="_static/folds.js' in text


def test_fold_audit_closes_after_its_nested_sections():
    import postprocess
    html_in = ('<section id="a"><h2>A</h2><p>x</p></section>'
               '<section id="checking-the-book-s-numbers-3"><h2>Check</h2><p>t</p>'
               '<section id="m"><h3>M</h3><p>live</p></section></section><footer>f</footer>')
    out = postprocess.fold_audit(html_in)
    assert out == ('<section id="a"><h2>A</h2><p>x</p></section>'
                   '<section id="checking-the-book-s-numbers-3"><details class="audit"><summary><h2>Check</h2>'
                   '</summary><p>t</p><section id="m"><h3>M</h3><p>live</p></section></details>\n</section>'
                   '<footer>f</footer>')
    assert postprocess.fold_audit(out) == out
    assert postprocess.fold_audit("<p>no audit</p>") == "<p>no audit</p>"


def test_an_interactive_figure_becomes_its_image_then_a_div_with_its_spec():
    spec = {"data": [{"type": "scatter", "x": [1, 2], "y": [3, 4]}], "layout": {"sliders": []}}
    out = image()
    out["data"][convert.INTERACTIVE_MIME] = spec
    cell = convert.convert_code_cell(code(FIGURE_CELL, [out]), "fixture, cell 1")
    assert convert.INTERACTIVE_MIME not in cell["outputs"][0]["data"] and "image/png" in cell["outputs"][0]["data"]
    div = cell["outputs"][1]["data"]["text/html"]
    m = re.search(r'<div class="inferlab-interactive" data-figure="fig-15-9-9-dot" data-spec="([^"]*)"></div>', div)
    assert m and json.loads(html_unescape(m.group(1))) == spec
    assert convert.has_interactive(notebook([code(FIGURE_CELL, [dict(image(), data={**image()["data"],
                                                                                  convert.INTERACTIVE_MIME: spec})])]))
    assert not convert.has_interactive(notebook(CHAPTER_CELLS))
    with pytest.raises(convert.ConversionError, match="interactive figure needs"):
        convert.convert_code_cell(code("x", [out]), "fixture, cell 2")


def html_unescape(text: str) -> str:
    import html
    return html.unescape(text)


def test_a_long_substituted_equation_is_broken_into_aligned_lines():
    long = (r"t = \frac{M + B \cdot C}{\text{BW}} = \frac{26.03\ \text{GB} + 16 \cdot 0.8192\ \text{GB}}"
            r"{3.35\ \text{TB/s}} = 11.68\ \text{ms},\qquad \text{throughput} = \frac{16}{11.68\ \text{ms}} = 1370")
    out = convert.reflow_equation(long)
    assert out.startswith("\\begin{aligned}") and out.endswith("\\end{aligned}")
    lines = out.split("\n")[1:-1]
    assert lines[0] == r"t &= \frac{M + B \cdot C}{\text{BW}} \\"
    assert lines[2] == r" &= 11.68\ \text{ms} \\[4pt]"          # the \qquad's neighbour starts a new row
    assert lines[3].startswith(r"\text{throughput} &= \frac{16}")
    assert all(len(line) <= convert.EQUATION_CHARS for line in lines)
    assert convert.reflow_equation("a = b") == "a = b"          # short: unchanged
    # no '=' to break at: a long sum breaks at its top-level '+' (not inside \\left( ... \\right))
    tp = (r"t(K) \approx \frac{t(1)}{K} + 2L\left(\frac{\text{message bytes}}{\text{link BW}} + t_\text{latency}\right)"
          r" + t_\text{other overhead of the step}")
    rows = convert.reflow_equation(tp, 60).split("\n")[1:-1]
    assert rows[:2] == [r"&t(K) \\", r"&\approx \frac{t(1)}{K} \\"]
    assert rows[2].startswith(r"&\quad + 2L\left(") and rows[2].endswith(r"\right) \\")
    md = "Text\n\n$$\n" + long + "\n$$"
    assert convert.reflow_display_math(md).startswith("Text\n\n$$\n\\begin{aligned}")


def test_defined_terms_are_the_bold_names_not_the_bold_labels():
    text = ("**The question.** Why? **What you will take away** ... the **KV cache** holds, with "
            "**grouped-query attention (GQA)** fewer; the factor **6**; **\"What if?\"**; **MFU** and **MBU**.")
    assert convert.defined_terms(text) == ["KV cache", "grouped-query attention", "GQA", "MFU", "MBU"]
    cells = [md("# T\n\nThe **ridge point** is..."), md("## Exercises\n\nThe **answer** is"), md("**later term**")]
    out = convert.index_terms(cells)
    assert out[0]["source"] == "# T\n\n```{index} ridge point\n```\n\n\nThe **ridge point** is..."
    assert out[1:] == cells[1:]                      # nothing indexed from the exercises on


def test_the_index_entry_of_a_defined_term_reaches_the_page(built):
    text = page(built, "15_9_9_fixture")
    assert re.search(r'<span id="index-\d+"></span>', text) or 'id="index-0"' in text


@pytest.mark.parametrize("source, folded", [
    ("# %matplotlib inline\nfrom IPython.display import Markdown\n\nfrom inferlab import plots, reader", True),
    ("from inferlab.notebook import reader\n\nreader.install_display();  # alt text on every figure", True),
    ("from inferlab.notebook import reader\nreader.install_display()\nprint(reader.x)", False),
    ("# What if? ----\nMODEL, GPU, PREC = reader.what_if('llama-2-13b', 'h100-sxm')\nBATCH = 16", True),
    ("from inferlab import diagrams\n\ndiagrams.kv_cache_diagram(MODEL, PREC)", True),   # the picture is the lesson
    ("reader.draw(plots.ttft_plot, MODEL, GPU, PREC)", True),       # a figure: the picture is what reads
    ("reader.draw_if_fits(FIT, plots.cost_plot, MODEL, GPU)", True),
    ("x = 1", False),
])
def test_imports_and_the_what_if_cell_fold_their_code_in_the_book(source, folded):
    cell = convert.convert_code_cell(code(source, [stream("Scenario\n")]), "fixture, cell 1")
    assert ("hide-input" in cell["metadata"]["tags"]) is folded


def test_a_chapters_audit_heading_counts_what_its_reader_verdict_summary_cell_printed():
    # the notebooks print the summary as `reader.verdict_summary(...)`: the heading must still get its counts
    cells = [{"cell_type": "markdown", "source": "## Checking the book's numbers\nIntro."},
             {"cell_type": "code", "source": 'print(reader.verdict_summary("15.1.2"))',
              "outputs": [{"output_type": "stream",
                           "text": "15.1.2: 40 claims: 31 consistent, 2 approximation, 3 erratum, 4 unchecked\n"}]}]
    out = convert.count_audit_heading(cells)
    assert out[0]["source"] == ("## Checking the book's numbers: 40 numbers checked: 31 \u2713, 2 \u2248 approximations, "
                                "3 errata, 4 unchecked\nIntro.")


def test_a_long_chain_that_starts_with_approx_aligns_at_its_first_relation():
    # the left column holds only the left-hand side, so the substituted fraction does not widen every row
    tex = (r"t_\text{step}(B) \approx \frac{M_\text{weights} + B \cdot C_\text{kv}(S)}{\text{BW}} = "
           r"\frac{26.0\ \text{GB} + 16 \cdot 0.819\ \text{GB}}{3.35\ \text{TB/s}} = 11.7\ \text{ms}")
    rows = convert.reflow_equation(tex).split("\n")[1:-1]
    assert rows == [r"t_\text{step}(B) &\approx \frac{M_\text{weights} + B \cdot C_\text{kv}(S)}{\text{BW}} \\",
                    r" &= \frac{26.0\ \text{GB} + 16 \cdot 0.819\ \text{GB}}{3.35\ \text{TB/s}} \\",
                    r" &= 11.7\ \text{ms}"]
