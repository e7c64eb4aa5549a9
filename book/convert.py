"""Convert the chapter notebooks' markup conventions (book/README.md) into MyST for Sphinx + myst-nb.

Pure functions over notebook JSON (dicts) and Markdown strings; the build (book/build.py) applies
them to copies of chapters/*.ipynb in a staging folder and never writes to chapters/.
Nothing is executed: the stored outputs are what the book shows.

The conventions, and what each becomes:
  figure cell   `# figure: fig-x` / `# caption: ...` / `# alt: ...`  -> myst-nb figure metadata
                (numbered figure with caption, image alt text: the image's own "alt" metadata,
                what the library says the figure draws, else the `# alt:` line); the three
                lines leave the source
  `[text](#fig-x)`                 -> {numref} "Figure N"
  `<!-- equation: eq-x -->` + $$..$$ -> {math} block labelled eq-x (numbered)
  `[text](#eq-x)`                  -> {eq} "(N)"
  `[t](../ERRATA.md#a)`            -> the errata page
  `[t](../book/references.md#key)` -> {ref} to the bibliography entry `key`
  `> **Erratum <id>.** ...`        -> warning admonition with anchor erratum-<id>
  `> **Takeaway.** ...`            -> tip admonition titled Takeaway (inferlab.notebook.worked_examples.takeaway)
  `# SOLUTION` code cell           -> collapsed ("Show solution") cell
  `<!-- SOLUTION -->` markdown     -> collapsed <details> block
  `check("<id>", ...)` code cell   -> its stored PASS replaced by a folded hint (exercise_hint)
  `equations.X.worked`, `worked_examples.equation/takeaway` cell -> code folded ("hide-input"): the output reads as prose
  a cell that only writes prose (Markdown outputs) or draws through `reader.draw`/`draw_if_fits`
                                   -> code folded too; an interview drill's answer (`interview.answer`)
                                   -> code left out (the answer is a fold of its own)
  `# NBVAL_...` comment lines      -> left out of the code shown (the test runner's markers, not the reader's)
  `<!-- lab -->...<!-- /lab -->`   -> left out (what applies in JupyterLab only)
  `<!-- web: text -->`             -> `text` (what the web page says instead; invisible in JupyterLab)
  `<!-- YOUR ANSWER -->` markdown  -> a box titled "Your answer" (an interview drill's answer cell)
  HTML table in an output          -> every cell labelled with its column (stacked on phones)
  figure cell with other outputs   -> split, keeping the outputs' order (split_figure_cell)
"""
from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path

INDEX_SOURCE = "00_index.ipynb"
INDEX_PAGE = "index"          # the staged name of the index notebook: build/book/index.html

FIGURE_KEYS = ("figure", "caption", "alt")
_FIG_LINE = re.compile(r"^#\s*(figure|caption|alt)\s*:\s*(.*?)\s*$")
_FIG_NAME = re.compile(r"^fig-[a-z0-9][a-z0-9-]*$")
_EQUATION = re.compile(
    r"^[ \t]*<!--\s*equation:\s*(?P<label>eq-[A-Za-z0-9_-]+)\s*-->[ \t]*\n"
    r"\s*\$\$(?P<tex>.+?)\$\$(?P<after>[^\n]*)",
    re.S | re.M,
)
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)\)")
_ERRATUM_HEAD = re.compile(r"^>\s*\*\*Erratum\s+(?P<id>[^*]+?)\.?\*\*\s*(?P<rest>.*)$")
_IMAGE_MIMES = ("image/png", "image/svg+xml", "image/jpeg", "image/gif")
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class ConversionError(ValueError):
    """A notebook breaks a markup convention; the message names the notebook, cell and rule."""


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _escape_role_text(text: str) -> str:
    return text.replace("`", "'").replace("<", r"\<").replace(">", r"\>")


# --------------------------------------------------------------------------- markdown cells
def convert_equations(text: str) -> str:
    """`<!-- equation: eq-x -->` followed by `$$ TeX $$` -> a {math} block labelled eq-x."""
    def repl(m: re.Match) -> str:
        tex = reflow_equation(m.group("tex").strip())   # a long one as lines that fit the column
        after = m.group("after").strip()
        block = f"```{{math}}\n:label: {m.group('label')}\n\n{tex}\n```"
        return block + (f"\n\n{after}" if after else "")
    return _EQUATION.sub(repl, text)


def convert_link(text: str, target: str) -> str | None:
    """The MyST for one Markdown link, or None to leave it as it is."""
    if target.startswith("#fig-"):
        ref = f"{{numref}}`Figure %s <{target[1:]}>`"
        return ref if re.match(r"(?i)\s*fig(ure|\.)?", text) else f"{text} ({ref})"
    if target.startswith("#eq-"):
        ref = f"{{eq}}`{target[1:]}`"
        return f"Eq. {ref}" if re.match(r"(?i)\s*(eq\b|eq\.|equation)", text) else f"{text} (Eq. {ref})"
    m = re.fullmatch(r"(?:\.\./)?(?:book/)?references\.md#(?P<key>[A-Za-z0-9_-]+)", target)
    if m:
        return f"{{ref}}`{_escape_role_text(text)} <{m.group('key')}>`"
    m = re.fullmatch(r"(?:\.\./)?book/notation\.md(?P<anchor>#.*)?", target)
    if m:
        return f"[{text}](notation.md{m.group('anchor') or ''})"
    m = re.fullmatch(r"\.\./ERRATA\.md(?P<anchor>#.*)?", target)
    if m:
        return f"[{text}](errata.md{m.group('anchor') or ''})"
    m = re.fullmatch(re.escape(INDEX_SOURCE) + r"(?P<anchor>#.*)?", target)
    if m:
        return f"[{text}]({INDEX_PAGE}.ipynb{m.group('anchor') or ''})"
    return None


def convert_links(text: str) -> str:
    def repl(m: re.Match) -> str:
        out = convert_link(m.group("text"), m.group("target"))
        return m.group(0) if out is None else out
    return _LINK.sub(repl, text)


def convert_errata_boxes(text: str) -> str:
    """A blockquote whose first line is `> **Erratum <id>.** ...` -> a warning admonition."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _ERRATUM_HEAD.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        claim = m.group("id").strip()
        body = [m.group("rest")]
        i += 1
        while i < len(lines) and lines[i].startswith(">"):
            body.append(re.sub(r"^>\s?", "", lines[i]))
            i += 1
        out += [f"````{{admonition}} Erratum {claim}", ":class: warning erratum", "",
                f'<span id="erratum-{claim}"></span>{body[0]}', *body[1:], "````"]
    return "\n".join(out)


_TAKEAWAY_HEAD = re.compile(r"^>\s*\*\*Takeaway\.\*\*\s*(?P<rest>.*)$")


def convert_takeaways(text: str) -> str:
    """A blockquote whose first line is `> **Takeaway.** ...` (inferlab.notebook.worked_examples.takeaway) -> a tip
    callout titled Takeaway."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _TAKEAWAY_HEAD.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        body = [m.group("rest")]
        i += 1
        while i < len(lines) and lines[i].startswith(">"):
            body.append(re.sub(r"^>\s?", "", lines[i]))
            i += 1
        out += ["````{admonition} Takeaway", ":class: tip takeaway", "", *body, "````"]
    return "\n".join(out)


_LAB_ONLY = re.compile(r"<!--\s*lab\s*-->.*?<!--\s*/lab\s*-->", re.S)
_WEB_ONLY = re.compile(r"<!--\s*web:\s*(.*?)\s*-->", re.S)
ANSWER_MARK = "<!-- YOUR ANSWER -->"


def convert_lab_and_web(text: str) -> str:
    """What a notebook says only in JupyterLab (`<!-- lab -->...<!-- /lab -->`) left out, and what the
    web page says instead (`<!-- web: ... -->`, a comment JupyterLab does not show) put in."""
    return _WEB_ONLY.sub(lambda m: m.group(1), _LAB_ONLY.sub("", text))


def convert_answer_cell(text: str) -> str:
    """An interview drill's answer cell (first line `<!-- YOUR ANSWER -->`) -> a box titled "Your answer"."""
    body = text.lstrip().removeprefix(ANSWER_MARK).strip()
    return f"````{{admonition}} Your answer\n:class: your-answer\n\n{body}\n````"


def convert_markdown(text: str) -> str:
    """All markdown conventions of one cell (what is JupyterLab's or the web's, equations, errata and
    takeaway boxes, links; solutions and answer cells wrapped)."""
    solution = text.lstrip().startswith("<!-- SOLUTION -->")
    answer = text.lstrip().startswith(ANSWER_MARK)
    text = convert_links(convert_takeaways(convert_errata_boxes(convert_equations(convert_lab_and_web(text)))))
    if solution:
        body = text.lstrip().removeprefix("<!-- SOLUTION -->").strip()
        text = f'<details class="solution">\n<summary>Show solution</summary>\n\n{body}\n\n</details>'
    elif answer:
        text = convert_answer_cell(text)
    return text


# A display equation whose TeX is longer than this (characters, a rough proxy for its width) is
# broken into lines: about 676 CSS px of column hold some 90 characters of a substituted equation.
EQUATION_CHARS = 90
_DISPLAY_MATH = re.compile(r"\$\$\n?(?P<tex>.+?)\n?\$\$", re.S)


def _top_level_split(tex: str, token: str) -> list[str]:
    """`tex` split at each `token` outside braces and \\left...\\right pairs."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(tex):
        if tex.startswith("\\left", i) or tex[i] == "{":
            depth += 1
        elif tex.startswith("\\right", i) or tex[i] == "}":
            depth -= 1
        elif depth == 0 and tex.startswith(token, i) and not (token == "=" and tex[i - 1:i] in "<>!\\"):
            parts.append(tex[start:i])
            start = i + len(token)
            i = start
            continue
        i += 1
    parts.append(tex[start:])
    return [p.strip().rstrip(",").strip() for p in parts if p.strip()]


def _chain_rows(piece: str) -> str:
    """A chain `A ≈ B = C = D` as aligned rows, one relation each, aligned at the relation: the
    left column holds only A, so a long B does not widen every row below it."""
    pairs = []
    for k, part in enumerate(_top_level_split(piece, "\\approx")):
        for j, step in enumerate(_top_level_split(part, "=")):
            pairs.append(("\\approx" if k > 0 and j == 0 else "=", step))
    head, rest = pairs[0][1], pairs[1:]
    return head + " " + " \\\\\n ".join(f"&{rel} {step}" for rel, step in rest)


def reflow_equation(tex: str, limit: int = EQUATION_CHARS) -> str:
    """A long display equation (more than `limit` characters of TeX) as lines that fit a column:
    the equations it joins with \\qquad one under the other, and each long chain A = B = C one
    step per line (an aligned block). A short one comes back unchanged."""
    if len(tex) <= limit:
        return tex
    rows = []
    for piece in _top_level_split(tex, "\\qquad"):
        relation = "=" if len(_top_level_split(piece, "=")) > 1 else "\\approx"
        steps = _top_level_split(piece, relation)
        chunks = [steps[0]] + [f"{relation} " + step for step in steps[1:]]
        if len(piece) > limit and any(len(c) > limit for c in chunks):
            # a step still too long breaks at its top-level sums: every row left-aligned, each
            # continuation of a sum indented under the step it continues
            out = []
            for c in chunks:
                terms = _top_level_split(c, " + ") if len(c) > limit else [c]
                out += ["&" + terms[0]] + ["&\\quad + " + t for t in terms[1:]]
            rows.append(" \\\\\n".join(out))
        elif len(piece) > limit and len(steps) > 1:
            rows.append(_chain_rows(piece))
        else:
            rows.append(piece.replace("=", "&=", 1) if "=" in piece else "&" + piece)
    return "\\begin{aligned}\n" + " \\\\[4pt]\n".join(rows) + "\n\\end{aligned}"


def reflow_display_math(text: str, limit: int = EQUATION_CHARS) -> str:
    """Every `$$...$$` of a Markdown output reflowed (reflow_equation)."""
    return _DISPLAY_MATH.sub(lambda m: f"$$\n{reflow_equation(m.group('tex').strip(), limit)}\n$$", text)


# --------------------------------------------------------------------------- code cells
def figure_markup(source: str) -> tuple[dict[str, str], str]:
    """The `# figure:/# caption:/# alt:` lines at the top of a code cell, and the rest of it.

    Other leading comment lines (e.g. `# NBVAL_IGNORE_OUTPUT`) may come before or between them.
    Returns ({} , source) for a cell without them; raises when only some of the three are there.
    """
    lines = source.split("\n")
    found: dict[str, str] = {}
    keep: list[str] = []
    i = 0
    while i < len(lines) and lines[i].lstrip().startswith("#"):
        m = _FIG_LINE.match(lines[i].strip())
        if m and m.group(1) not in found:
            found[m.group(1)] = m.group(2)
        else:
            keep.append(lines[i])
        i += 1
    if not found:
        return {}, source
    missing = [k for k in FIGURE_KEYS if not found.get(k)]
    if missing:
        raise ConversionError(f"figure cell lacks '# {missing[0]}: ...' (has {sorted(found)})")
    if not _FIG_NAME.match(found["figure"]):
        raise ConversionError(f"figure name {found['figure']!r} must look like fig-15-1-1-roofline")
    return found, "\n".join(keep + lines[i:])


def _image_outputs(cell: dict) -> list[dict]:
    return [o for o in cell.get("outputs", [])
            if o.get("output_type") in ("display_data", "execute_result")
            and any(k in o.get("data", {}) for k in _IMAGE_MIMES)]


def _text_width(cell: dict) -> int:
    """The longest line of the cell's text outputs (stream or text/plain), in characters."""
    width = 0
    for o in cell.get("outputs", []):
        data = o.get("data", {})
        if o.get("output_type") == "stream":
            text = o.get("text", "")
        elif any(k in data for k in _IMAGE_MIMES):
            continue
        elif "text/html" in data:        # only its preformatted blocks (a folded table) keep their width
            html_text = data["text/html"]
            html_text = "".join(html_text) if isinstance(html_text, list) else html_text
            text = html.unescape("\n".join(re.findall(r"<pre[^>]*>(.*?)</pre>", html_text, re.S)))
        elif "text/markdown" in data:    # shown as Markdown: only its fenced blocks are preformatted
            md = data["text/markdown"]
            md = "".join(md) if isinstance(md, list) else md
            text = "\n".join(re.findall(r"^```[^\n]*\n(.*?)^```", md, re.S | re.M))
        else:
            text = data.get("text/plain", "")
        text = "".join(text) if isinstance(text, list) else text
        width = max([width] + [len(line) for line in text.splitlines()])
    return width


# Output widths are rounded up to one of these (characters); custom.css scales the font of a
# wider output so that its longest line fits the column (text tables never scroll sideways).
WIDTH_BUCKETS = (100, 120, 140, 160, 180, 200, 240, 300)


def width_tag(width: int) -> str | None:
    if width <= WIDTH_BUCKETS[0]:
        return None
    bucket = next((b for b in WIDTH_BUCKETS if width <= b), WIDTH_BUCKETS[-1])
    return f"text-width-{bucket}"


_TABLE = re.compile(r"<table\b.*?</table>", re.S | re.I)
_ROW = re.compile(r"<tr\b[^>]*>(.*?)</tr>", re.S | re.I)
_HEAD_CELL = re.compile(r"<th\b[^>]*>(.*?)</th>", re.S | re.I)
_DATA_CELL = re.compile(r"<td\b(?![^>]*\bdata-label=)", re.I)


def label_table_cells(html_text: str) -> str:
    """Every <td> of an HTML table gets data-label="<its column's header text>", so that custom.css
    can stack a table on a narrow screen (one block per row, each value under its column's name)
    whatever its columns are. Tables without a header row are left as they are."""
    def one_table(m: re.Match) -> str:
        table = m.group(0)
        rows = _ROW.findall(table)
        header = next((r for r in rows if _HEAD_CELL.search(r)), None)
        if header is None:
            return table
        labels = [html.escape(html.unescape(re.sub(r"<[^>]+>", "", h)).strip(), quote=True)
                  for h in _HEAD_CELL.findall(header)]

        def one_row(r: re.Match) -> str:
            cells = iter(labels)
            return _DATA_CELL.sub(lambda c: f'{c.group(0)} data-label="{next(cells, "")}"', r.group(0))
        return _ROW.sub(one_row, table)
    return _TABLE.sub(one_table, html_text)


def errata_hrefs(html_text: str) -> str:
    """Links of an HTML output to ERRATA.md (`href="../ERRATA.md#<anchor>"`, as a notebook has them)
    -> the book's errata page, whose section ids are ERRATA.md's heading slugs."""
    return re.sub(r'href="(?:\.\./)?ERRATA\.md(#[^"]*)?"', lambda m: f'href="errata.html{m.group(1) or ""}"', html_text)


WORKED_CALL = re.compile(r"\b(worked(_examples)?\.(equation|takeaway)|equations\.\w+\.worked)\(")
PROSE_CALL = re.compile(r"\b(reader\.draw(_if_fits)?)\(")
DRILL_CALL = re.compile(r"\binterview\.answer\(")
_NBVAL_LINE = re.compile(r"^[ \t]*#\s*NBVAL_\w+.*\n?", re.M)


def writes_prose(cell: dict) -> bool:
    """A code cell whose every output is rendered Markdown (a sentence, a takeaway, a table in words):
    its code writes prose, and the book folds it (an exercise's check cell, whose output the book
    replaces with a hint, is not one)."""
    outs = cell.get("outputs", [])
    return bool(outs) and all(o.get("output_type") in ("display_data", "execute_result")
                              and "text/markdown" in o.get("data", {}) for o in outs)


def without_test_markers(source: str) -> str:
    """The code a reader sees: the test runner's `# NBVAL_...` comment lines left out."""
    return _NBVAL_LINE.sub("", source)
_CHECK_CALL = re.compile(r"""^check\(\s*["'](?P<id>[0-9.]+-ex\d+)["']""", re.M)


def exercise_check_id(source: str) -> str | None:
    """The exercise id of a cell that runs `check("<id>", ...)` (comments before it allowed)."""
    code = "\n".join(line for line in source.split("\n") if not line.lstrip().startswith("#")).strip()
    m = _CHECK_CALL.match(code)
    return m.group("id") if m else None


def exercise_hint(exercise_id: str) -> str:
    """A folded hint for an exercise, as Markdown: its parts' hints and the slips its check
    recognises (the texts `check` prints on a wrong answer; never an expected value)."""
    from inferlab import exercises
    try:
        ex = exercises.get(exercise_id)
    except (KeyError, ValueError) as e:
        raise ConversionError(f"check({exercise_id!r}): no such exercise ({e})") from None
    hints = [p.hint.format(**ex.params) for p in ex.parts if p.hint]
    slips = list(dict.fromkeys(m.hint for m in ex.known_mistakes()))
    hints = [h.replace("*", r"\*") for h in hints]        # 6*P*S is arithmetic, not emphasis
    slips = [h.replace("*", r"\*") for h in slips]
    lines = [f"- {h[0].upper()}{h[1:]}." for h in hints] or [
        "- Work through the statement with the library functions it names."]
    if slips:
        lines += ["", "Slips the check recognises, and what it says for each:", ""]
        lines += [f"- “{h}”" for h in slips]
    body = "\n".join(lines)
    return (f'<details class="hint">\n<summary>Hint ({exercise_id})</summary>\n\n{body}\n\n</details>\n\n'
            "Run the cell in JupyterLab (`make lab`): the check says PASS, or FAIL with the hint that fits "
            "your answer.")


def figure_alt(image_output: dict, fallback: str) -> str:
    """The alt text of a figure: what the figure draws, as the library described it when it was
    drawn (the PNG's "alt" metadata: inferlab.notebook.alttext.describe), else the cell's `# alt:` line."""
    meta = image_output.get("metadata", {})
    for mime in _IMAGE_MIMES:
        alt = (meta.get(mime) or {}).get("alt") if isinstance(meta.get(mime), dict) else None
        if alt and alt.strip():
            return alt.strip()
    return fallback


INTERACTIVE_MIME = "application/vnd.inferlab.plotly+json"   # inferlab.notebook.interactive.MIME
INTERACTIVE_CLASS = "inferlab-interactive"


def interactive_output(spec: dict, figure: str) -> dict:
    """The plotly.js spec of an interactive figure (inferlab.notebook.interactive) as an HTML output: a div
    that book/_static/interactive.js draws with the book's own copy of plotly.js."""
    data = html.escape(json.dumps(spec, separators=(",", ":")), quote=True)
    how = "choose from the menus and move the slider" if spec.get("controls") else "move the slider"
    body = (f'<p class="interactive-lead">The same figure to explore: hover for the values, {how} '
            f'to change the scenario.</p><div class="{INTERACTIVE_CLASS}" data-figure="{html.escape(figure)}" '
            f'data-spec="{data}"></div>')
    return {"output_type": "display_data", "metadata": {},
            "data": {"text/html": body, "text/plain": f"interactive version of {figure}"}}


def has_interactive(nb: dict) -> bool:
    return any(INTERACTIVE_MIME in o.get("data", {}) for c in nb.get("cells", []) for o in c.get("outputs", []))


_IMPORT_LINE = re.compile(r"^\s*(#.*|%.*|(from\s+\S+\s+)?import\s+.+|)$")
# The set-up cell's one call besides imports: the notebook's display formatter (alt text on figures).
_SETUP_CALL = re.compile(r"^\s*reader\.install_display\(\);?\s*(#.*)?$")


def setup_cell(source: str) -> bool:
    """A cell the book folds to its output (code under "Show code cell source"): the What-if cell
    (first line `# What if?`), whose scenario line is what a reader of the page needs, and a cell of
    imports only (with the display formatter's installation). The figure cells and the computations stay
    open."""
    lines = source.strip().splitlines()
    if not lines:
        return False
    if lines[0].startswith("# What if?"):
        return True
    return (all(_IMPORT_LINE.match(line) or _SETUP_CALL.match(line) for line in lines)
            and any("import" in line for line in lines))


def convert_code_cell(cell: dict, where: str) -> dict:
    cell = copy.deepcopy(cell)
    meta = cell.setdefault("metadata", {})
    tags = meta.setdefault("tags", [])
    source = _source(cell)
    # A live widget has no state in a static page (its default view is drawn as an image beside it);
    # Markdown outputs (rendered conclusions, erratum boxes, links) follow the Markdown conventions.
    cell["outputs"] = [o for o in cell.get("outputs", []) if _WIDGET_MIME not in o.get("data", {})]
    for o in cell["outputs"]:
        md = o.get("data", {}).get("text/markdown")
        if md is not None:
            o["data"]["text/markdown"] = reflow_display_math(convert_markdown("".join(md) if isinstance(md, list) else md))
        table = o.get("data", {}).get("text/html")
        if table is not None:
            o["data"]["text/html"] = errata_hrefs(label_table_cells("".join(table) if isinstance(table, list) else table))
    if DRILL_CALL.search(source):
        # an interview drill's answer: its output is a fold of its own, right under the answer box
        tags.append("remove-input")
    elif WORKED_CALL.search(source) or PROSE_CALL.search(source) or writes_prose(cell):
        # a substituted equation, a takeaway, a sentence or a figure drawn from computed values, an
        # interview answer: it reads as prose (or as a figure), its code folded (the notebook keeps it)
        tags.append("hide-input")
    elif setup_cell(source) or "diagrams." in source:
        # imports and the What-if cell (a static page cannot run them), and a mechanism diagram (the
        # picture is the lesson; its one library call sits under "Show code cell source")
        tags.append("hide-input")
    exercise = exercise_check_id(source)
    if exercise:   # the static page cannot run the check: a folded hint instead of a stored PASS
        cell["outputs"] = [{"output_type": "display_data", "metadata": {},
                            "data": {"text/markdown": exercise_hint(exercise), "text/plain": exercise}}]
        tags.append("exercise-check")
    specs = {}
    for k, o in enumerate(cell["outputs"]):
        spec = o.get("data", {}).pop(INTERACTIVE_MIME, None)
        if spec is not None:
            specs[k] = spec
    images = _image_outputs(cell)
    try:
        fig, rest = figure_markup(source)
    except ConversionError as e:
        raise ConversionError(f"{where}: {e}") from None
    if specs and not fig:
        raise ConversionError(f"{where}: an interactive figure needs the '# figure:/# caption:/# alt:' lines")
    for k in sorted(specs, reverse=True):   # each spec right after the output that carried it
        cell["outputs"].insert(k + 1, interactive_output(specs[k], fig["figure"]))
    if fig:
        if len(images) != 1:
            raise ConversionError(f"{where}: figure {fig['figure']} must produce exactly one image, "
                                  f"found {len(images)}")
        cell["source"] = rest
        meta.setdefault("mystnb", {})["figure"] = {"name": fig["figure"], "caption": fig["caption"]}
        meta["mystnb"]["image"] = {"alt": figure_alt(images[0], fig["alt"])}
    elif images:
        raise ConversionError(f"{where}: draws an image but has no '# figure:/# caption:/# alt:' "
                              "lines (every image needs a caption and alt text)")
    cell["source"] = without_test_markers(_source(cell))
    if source.lstrip().startswith("# SOLUTION") or "solution" in tags:
        tags.append("hide-cell")
        meta.setdefault("mystnb", {})["code_prompt_show"] = "Show solution"
        meta["mystnb"]["code_prompt_hide"] = "Hide solution"
    tag = width_tag(_text_width(cell))
    if tag:
        tags.append(tag)
    return cell


# The source of a cell the converter adds to carry outputs of the cell above: never empty (myst-nb
# skips a cell whose source is blank, outputs and all), never shown (tag remove-input).
CARRIER_SOURCE = "# outputs of the cell above (book/convert.py)"


def output_carrier(outputs: list[dict], tags: list[str] = ()) -> dict:
    """An input-less code cell that shows `outputs` (and only them)."""
    return {"cell_type": "code", "execution_count": None, "source": CARRIER_SOURCE,
            "metadata": {"tags": ["remove-input", *tags]}, "outputs": outputs}


def split_figure_cell(cell: dict) -> list[dict]:
    """A figure cell whose image comes with other outputs (a table printed before it, a sentence
    rendered under it) -> cells that show the same outputs in the same order: myst-nb would
    otherwise label every output of the cell with the figure's name.

    The code and the outputs before the image stay in the first cell; the image is alone in the
    figure cell (input removed when the code was already shown); the outputs after it follow in
    an input-less carrier cell. Each piece is tagged for its own text width."""
    if "figure" not in cell.get("metadata", {}).get("mystnb", {}):
        return [cell]
    outputs = cell.get("outputs", [])
    images = _image_outputs(cell)
    if len(outputs) == len(images):
        return [cell]
    k = outputs.index(images[0])
    before, after = outputs[:k], outputs[k + 1:]
    meta = cell["metadata"]
    plain_tags = [t for t in meta.get("tags", []) if not t.startswith("text-width-")]
    cells = []
    if before:
        code_meta = {key: v for key, v in meta.items() if key != "mystnb"}
        code_meta["tags"] = list(plain_tags)
        cells.append(dict(cell, metadata=code_meta, outputs=before))
        figure = output_carrier([images[0]])
        figure["metadata"]["mystnb"] = copy.deepcopy(meta["mystnb"])
        cells.append(figure)
    else:
        cells.append(dict(cell, metadata=dict(meta, tags=list(plain_tags)), outputs=[images[0]]))
    if after:
        cells.append(output_carrier(after))
    for c in cells:
        tag = width_tag(_text_width(c))
        if tag:
            c["metadata"]["tags"].append(tag)
    return cells


# --------------------------------------------------------------------------- notebooks
def toctree_cell(pages: list[str], caption: str | None = None, cell_id: str = "book-toctree") -> dict:
    body = "\n".join(pages)
    head = f":caption: {caption}\n" if caption else ""
    return {"cell_type": "markdown", "id": cell_id, "metadata": {},
            "source": f"```{{toctree}}\n:hidden:\n{head}:maxdepth: 2\n\n{body}\n```"}


# --------------------------------------------------------------------------- reference pages
DOCS_DIR = "docs"              # docs/*.md of the repository -> the book's "Reference" part, staged here
REFERENCE_CAPTION = "Reference"
_HEADING = re.compile(r"^(?P<hashes>#{1,6})(?P<rest>\s.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _even_headings(text: str) -> str:
    """Each heading at most one level below the one before it (outside code fences): Sphinx, run
    with warnings as errors, refuses a jump from # to ###."""
    out, level, fenced = [], 0, False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        m = None if fenced else _HEADING.match(line)
        if m:
            n = min(len(m.group("hashes")), level + 1)
            line, level = "#" * n + m.group("rest"), n
        out.append(line)
    return "\n".join(out)


def convert_docs_page(text: str, name: str, notebooks: list[str], docs: list[str]) -> str:
    """One docs/*.md page as a book page under docs/: links to the chapters, the notation and
    errata pages and the other docs pages made to work there; links to other repository files
    become their text (the book has no copy of them). A page must start with a `# ` title."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not first.startswith("# "):
        raise ConversionError(f"docs/{name}: a reference page must start with a '# ' title line (got {first[:40]!r})")

    def repl(m: re.Match) -> str:
        label, target = m.group("text"), m.group("target")
        if target.startswith(("#", "http://", "https://", "mailto:")):
            return m.group(0)
        path, _, anchor = target.partition("#")
        anchor = f"#{anchor}" if anchor else ""
        base = path.rsplit("/", 1)[-1]
        if base.endswith(".ipynb") and base in notebooks:
            return f"[{label}](../{stage_name(base)}.ipynb{anchor})"
        if path in (f"../book/{NOTATION_PAGE}.md", f"book/{NOTATION_PAGE}.md"):
            return f"[{label}](../{NOTATION_PAGE}.md{anchor})"
        if path in ("../ERRATA.md", "ERRATA.md"):
            return f"[{label}](../errata.md{anchor})"
        if base in docs and path in (base, f"./{base}", f"../{DOCS_DIR}/{base}", f"{DOCS_DIR}/{base}"):
            return f"[{label}]({base}{anchor})"
        return label
    return _LINK.sub(repl, _even_headings(text))


DOWNLOADS = "_downloads_src"   # staging folder of the files a page offers for download
NOTATION_PAGE = "notation"


def reader_note(source_name: str, downloads: list[str]) -> dict:
    """The box under a page's title: download buttons for the notebook's files, how to run it,
    and the notation page. `downloads`: the file names staged in DOWNLOADS (the .ipynb, the
    jupytext .py)."""
    kinds = {".ipynb": "notebook (.ipynb)", ".py": "source (.py, jupytext)"}
    buttons = " ".join(f"{{download}}`{kinds.get(Path(f).suffix, f)} <{DOWNLOADS}/{f}>`" for f in downloads)
    body = (f"**Download** {buttons}\n\n"
            "**Run it yourself:** clone the repository and run `make lab`: JupyterLab opens the companion, "
            f"where this page is `reader/{source_name}` (the exercises' answer cells empty, the checks kept); "
            "its *What if?* cell recomputes the page for another model or accelerator. "
            f"Symbols: [notation]({NOTATION_PAGE}.md).")
    return {"cell_type": "markdown", "id": "book-reader-note", "metadata": {},
            "source": f"```{{admonition}} Read it, run it\n:class: tip reader-note\n\n{body}\n```"}


def _insert_after_title(cells: list[dict], extra: dict) -> list[dict]:
    """`extra` right after the page's title: the first Markdown cell is split after its `# ` line."""
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        text = _source(cell)
        m = re.search(r"^# .*$", text, re.M)
        if not m:
            break
        head, rest = text[:m.end()], text[m.end():].lstrip("\n")
        new = [dict(cell, source=head), extra]
        if rest.strip():
            new.append({"cell_type": "markdown", "id": f"{cell.get('id', 'cell')}-rest", "metadata": {},
                        "source": rest})
        return cells[:i] + new + cells[i + 1:]
    return [extra] + cells


_BOLD = re.compile(r"\*\*(?P<term>[^*\n]{1,60}?)\*\*")
_ACRONYM = re.compile(r"^(?P<long>[^()]+?)\s*\((?P<short>[A-Za-z][A-Za-z0-9/ -]*)\)$")


def defined_terms(text: str) -> list[str]:
    """The terms a lecture cell defines: its **bold** phrases of one to five words that are not a
    sentence's label ("**The question.**", "**What you will take away**": a capitalised first word
    that is not an acronym, or a trailing stop or colon) nor a number; "long name (SHORT)" gives both."""
    terms = []
    for m in _BOLD.finditer(text):
        term = m.group("term").strip()
        first = term.split()[0]
        if (len(term.split()) > 5 or term[-1] in ".:;!?," or not re.search(r"[A-Za-z]", term) or term[0] in "\"'\u201c"
                or (first[0].isupper() and not first.isupper())):
            continue
        a = _ACRONYM.match(term)
        for t in ((a.group("long"), a.group("short")) if a else (term,)):
            t = t.replace(",", " ").strip()
            if t and t not in terms:
                terms.append(t)
    return terms


def index_terms(cells: list[dict]) -> list[dict]:
    """Each lecture cell (before the exercises) that defines terms starts with an {index} entry for
    them: the book's search finds an index entry and links to where it is defined (a section's long
    title is found only by a query of half its length)."""
    out = []
    for cell in cells:
        text = _source(cell)
        if cell.get("cell_type") == "markdown" and text.lstrip().startswith("## Exercises"):
            out += cells[len(out):]
            break
        if cell.get("cell_type") == "markdown":
            terms = defined_terms(text)
            if terms:   # after the cell's title line, if it starts with one (a page's title stays first)
                entry = "```{index} " + ", ".join(terms) + "\n```\n\n"
                head, sep, rest = text.partition("\n") if text.startswith("#") else ("", "", text)
                cell = dict(cell, source=(head + sep + "\n" if sep else "") + entry + rest)
        out.append(cell)
    return out


AUDIT_HEADING = "## Checking the book's numbers"   # a chapter page's closing section (folded in the book)
_VERDICT_SUMMARY_CELL = re.compile(r'^print\((?:reader\.)?verdict_summary\("(?P<section>15\.\d\.\d)"\)\)\s*$')
# a chapter page's claims ("15.1.2: 40 claims: ..."), or the statements a lab tests ("15.2.3: 11 statements: ...")
_SUMMARY_LINE = re.compile(r"^(?P<section>15\.\d\.\d): (?P<n>\d+) (?P<kind>claims|statements): (?P<counts>.*)$", re.M)
_VERDICT_WORDS = {"consistent": "\u2713", "approximation": "\u2248 approximations", "erratum": "errata",
                  "unchecked": "unchecked", "depends": "depend on the setting"}


def audit_counts(summary: str) -> str:
    """'15.1.2: 40 claims: 31 consistent, 2 approximation, 3 erratum, 4 unchecked' (the stored
    output of `print(verdict_summary(...))`) -> '40 numbers checked: 31 ✓, 2 ≈ approximations,
    3 errata, 4 unchecked'; '15.2.3: 11 statements: ...' -> '11 statements checked: ...'."""
    m = _SUMMARY_LINE.search(summary)
    if not m:
        raise ConversionError(f"no verdict summary line in {summary[:80]!r}")
    parts = []
    for item in m.group("counts").split(", "):
        n, _, verdict = item.partition(" ")
        if verdict not in _VERDICT_WORDS:
            raise ConversionError(f"unknown verdict {verdict!r} in the summary {summary[:80]!r}")
        parts.append(f"{n} {_VERDICT_WORDS[verdict]}")
    what = "numbers" if m.group("kind") == "claims" else "statements"
    return f"{m.group('n')} {what} checked: " + ", ".join(parts)


def count_audit_heading(cells: list[dict]) -> list[dict]:
    """The closing section's heading with its counts: the `## Checking the book's numbers` cell
    gets the verdict counts that the next `print(verdict_summary("15.x.y"))` cell stored, or (a lab
    without claims of its own) the first later code cell that printed a statements summary line."""
    for i, cell in enumerate(cells):
        text = _source(cell)
        if cell.get("cell_type") != "markdown" or not text.startswith(AUDIT_HEADING):
            continue
        for later in cells[i + 1:]:
            if later.get("cell_type") != "code":
                continue
            stored = "".join(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
                             for o in later.get("outputs", []) if o.get("output_type") == "stream")
            statements = _SUMMARY_LINE.search(stored)
            if _VERDICT_SUMMARY_CELL.match(_source(later).strip()) or (statements and statements["kind"] == "statements"):
                head, _, rest = text.partition("\n")
                cells[i] = dict(cell, source=f"{AUDIT_HEADING}: {audit_counts(stored)}\n{rest}")
                break
    return cells


def convert_notebook(nb: dict, name: str, toc: list[str] | None = None,
                     downloads: list[str] | None = None, reference: list[str] | None = None) -> dict:
    """A converted copy of one notebook; `toc` (page names) adds a hidden toctree (index page),
    `reference` (page names) a second one captioned "Reference" after it;
    `downloads` (file names staged in DOWNLOADS) adds the reader note under the title."""
    nb = copy.deepcopy(nb)
    nb.get("metadata", {}).pop("widgets", None)   # live widget state: nothing to show in a static page
    cells = []
    for i, cell in enumerate(nb.get("cells", [])):
        where = f"{name}, cell {i + 1}"
        if cell.get("cell_type") == "markdown":
            cell = copy.deepcopy(cell)
            cell["source"] = convert_markdown(_source(cell))
        elif cell.get("cell_type") == "code":
            cells += split_figure_cell(convert_code_cell(cell, where))
            continue
        cells.append(cell)
    cells = index_terms(count_audit_heading(cells))
    if downloads:
        cells = _insert_after_title(cells, reader_note(name, downloads))
    if toc:
        cells.append(toctree_cell(toc))
    if reference:
        cells.append(toctree_cell(reference, REFERENCE_CAPTION, "book-toctree-reference"))
    nb["cells"] = cells
    return nb


def convert_errata_page(text: str) -> str:
    """ERRATA.md as a book page: its relative links made to work from the book's root."""
    def repl(m: re.Match) -> str:
        target = m.group("target")
        if target.startswith(("#", "http://", "https://", "mailto:")):
            return m.group(0)
        if target.startswith("chapters/") and ".ipynb" in target:
            return f"[{m.group('text')}]({target.removeprefix('chapters/')})"
        return m.group("text")   # a repository file (data/claims.toml, ...): plain text in the book
    return _LINK.sub(repl, text)


def unlink_missing_pages(text: str, notebooks: list[str]) -> str:
    """Links of a Markdown page to chapter notebooks that are not in the book -> their plain text
    (a book built from a subset of the notebooks, such as the tests' fixture)."""
    def repl(m: re.Match) -> str:
        target = m.group("target")
        if target.endswith(".ipynb") and "/" not in target and target not in notebooks:
            return m.group("text")
        return m.group(0)
    return _LINK.sub(repl, text)


def stage_name(source_name: str) -> str:
    """chapters/<name>.ipynb -> the page name in the book (the index becomes index)."""
    stem = source_name.removesuffix(".ipynb")
    return INDEX_PAGE if source_name == INDEX_SOURCE else stem
