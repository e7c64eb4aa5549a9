# Sphinx configuration of the rendered companion (`make book`; see book/README.md).
# book/build.py copies this file into the staging folder next to the converted notebooks.
project = "inferlab: The Inference Workload"
author = "inferlab contributors"
html_title = "Chapter 15, The Inference Workload: the executable companion"

extensions = ["myst_nb"]
root_doc = "index"
exclude_patterns = [".doctrees", "**/.ipynb_checkpoints", "_downloads_src"]

# Notebooks are rendered with the outputs stored in them; nothing is executed.
nb_execution_mode = "off"
nb_merge_streams = True
# No ipywidgets JavaScript (myst-nb would load require.js and the widget manager from a CDN): the
# panels' live views are dropped by the converter and their default state is a static image.
nb_ipywidgets_js = {}
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
nb_render_markdown_format = "myst"   # text/markdown outputs (the lost formulas) get math too
myst_heading_anchors = 3          # [t](15_2_1_ttft_itl.ipynb#time-to-first-token) resolves

# Figures and key equations are numbered per page (Figure 1, 2, ... and (1), (2), ... on each
# chapter page, as the notebooks' own headings count them); prose refers to them by number.
numfig = True
math_numfig = True
numfig_format = {"figure": "Figure %s", "table": "Table %s", "code-block": "Listing %s"}

# MathJax 3 from the build's own _static/ (unpacked there by book/build.py): no CDN, works offline.
mathjax_path = "mathjax/tex-mml-chtml.js"

html_theme = "sphinx_book_theme"
html_static_path = ["_static"]
html_css_files = ["custom.css", "text-widths.css"]
# Folds open for printing and when a link points inside one (no network, no framework).
html_js_files = ["folds.js", "scrollcue.js"]
# plotly.js, when the build unpacked it (book/build.py: only if a page has an interactive figure),
# and the script that draws each interactive figure from its spec.
import os  # noqa: E402
if os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_static", "plotly", "plotly-basic.min.js")):
    html_js_files += ["plotly/plotly-basic.min.js", "interactive.js"]
html_copy_source = False
# Search from file://: the index is a script (searchindex.js), and no result fetches its page for a
# summary (a fetch of a file:// URL is refused), so a search logs no error; section titles are found.
html_show_search_summary = False
html_show_sourcelink = False
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_source_button": False,
    "use_repository_button": False,
    "use_issues_button": False,
    "use_edit_page_button": False,
    "launch_buttons": {},
}
# Light theme unless the reader switches (an empty mode makes the theme log a console error).
html_context = {"default_mode": "light"}


def number_per_page(app, env):
    """Sphinx numbers figures and equations through the whole book when the toctree is not
    numbered; restart the count on every page, keeping the order within the page."""
    for numbers in env.toc_fignumbers.values():
        for figtype, by_id in numbers.items():
            order = sorted(by_id, key=lambda node_id: by_id[node_id])
            numbers[figtype] = {node_id: (i,) for i, node_id in enumerate(order, start=1)}
    return []


def setup(app):
    # after Sphinx's toctree collector has assigned the book-wide numbers (same event, priority 500)
    app.connect("env-get-updated", number_per_page, priority=900)

# MathJax at 115 % of the text's size: a superscript inside an inline fraction (scriptscript
# style, half the size) then still renders at 11 CSS px or more (the book's smallest text).
mathjax3_config = {"chtml": {"scale": 1.15}}
