"""Build the static HTML book: chapters/*.ipynb (stored outputs, no execution) -> build/book/.

    python book/build.py                 # what `make book` runs
    python book/build.py --no-mathjax    # skip the MathJax assets (tests of the page structure)

Steps: copy book/ (conf.py, references.md, _static/) into a staging folder (build/book-src/),
convert each notebook's markup conventions there (book/convert.py; chapters/ is only read),
turn ERRATA.md into the errata page, write the cheat sheet from the library (inferlab.notebook.cheatsheet),
unpack MathJax 3 from the npm registry's tarball (pinned
version and sha512; cached in build/cache/) into _static/mathjax/, and run Sphinx with warnings
as errors (a broken figure, equation or citation reference fails the build); then rewrite the
built pages where CSS alone cannot (book/postprocess.py: code lines with a hanging indent; each
figure's phone variant, kept out of the staged notebook, offered by a <picture> element).
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import shutil
import sys
import tarfile
import time
import urllib.request
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import convert  # noqa: E402  (book/convert.py, next to this file)
import postprocess  # noqa: E402  (book/postprocess.py)

MATHJAX_VERSION = "3.2.2"
MATHJAX_URL = f"https://registry.npmjs.org/mathjax/-/mathjax-{MATHJAX_VERSION}.tgz"
# dist.integrity of mathjax@3.2.2 in the npm registry (`npm view mathjax@3.2.2 dist.integrity`)
MATHJAX_SHA512_B64 = "Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=="
# What the pages load: one combined component and what it loads on demand (fonts, extensions,
# menu, accessibility); the other combined bundles of the package are left out.
MATHJAX_KEEP = ("es5/tex-mml-chtml.js", "es5/input/", "es5/output/chtml", "es5/ui/", "es5/a11y/",
                "es5/adaptors/", "es5/sre/")
# plotly.js (basic bundle: scatter, bar; sliders) for the interactive figures, from the npm registry.
PLOTLY_VERSION = "4.1.1"
PLOTLY_URL = f"https://registry.npmjs.org/plotly.js-basic-dist-min/-/plotly.js-basic-dist-min-{PLOTLY_VERSION}.tgz"
# dist.integrity of plotly.js-basic-dist-min@4.1.1 (`npm view plotly.js-basic-dist-min@4.1.1 dist.integrity`)
PLOTLY_SHA512_B64 = "1oNF8PeQx2hv/y7tqEVWKD3JGwn/MGEMQ8mL9HUwsaqG9FGy/OU5FHUHvzqbqxN4mnwZGI9abTiE775C4kkjMQ=="
PLOTLY_FILE = "plotly/plotly-basic.min.js"     # under _static/ (conf.py loads it when present)
BOOK_FILES = ("conf.py", "references.md", "notation.md", "_static")
EXTRA_PAGES = ("cheatsheet", "notation", "errata", "references")
CHEATSHEET_SETUP = ("llama-2-13b", "h100-sxm")   # the book's worked example: the cheat sheet's numbers


def npm_tarball(cache: Path, name: str, url: str, sha512_b64: str, what: str) -> bytes:
    """A pinned npm tarball, from the cache or downloaded once; checked against its sha512."""
    path = cache / url.rsplit("/", 1)[-1]
    if path.exists():
        data = path.read_bytes()
    else:
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                data = r.read()
        except OSError as e:
            sys.exit(f"book: cannot download {name} from {url} ({e}); put the file at {path} by hand, or "
                     f"build with --no-{name.lower()} ({what})")
    digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != sha512_b64:
        path.unlink(missing_ok=True)
        sys.exit(f"book: {url} does not match its pinned sha512 (got {digest[:16]}...)")
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def mathjax_tarball(cache: Path) -> bytes:
    """The pinned MathJax tarball, from the cache or downloaded once; checked against its sha512."""
    return npm_tarball(cache, "MathJax", MATHJAX_URL, MATHJAX_SHA512_B64, "equations then show as TeX")


def unpack_plotly(cache: Path, static: Path) -> int:
    """plotly.js's minified basic bundle into _static/plotly/ (served with the book: no CDN)."""
    data = npm_tarball(cache, "Plotly", PLOTLY_URL, PLOTLY_SHA512_B64, "interactive figures then stay static")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        js = tar.extractfile("package/plotly-basic.min.js").read()
    target = static / PLOTLY_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(js)
    return len(js)


def unpack_mathjax(data: bytes, dest: Path) -> int:
    """Extract the kept part of package/es5/ into dest (= _static/mathjax); returns files written."""
    n = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("package/")
            if not member.isfile() or not name.startswith(MATHJAX_KEEP) or ".." in name:
                continue
            target = dest / name.removeprefix("es5/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
            n += 1
    return n


def cheatsheet_page() -> str:
    """The cheat-sheet page (inferlab.notebook.cheatsheet) for the book's worked example, from the specs in data/."""
    from inferlab.notebook import cheatsheet
    from inferlab import get_accelerator, get_model
    model, gpu = CHEATSHEET_SETUP
    return cheatsheet.markdown(get_model(model), get_accelerator(gpu))


DATASHEETS_MARKER = "<!-- DATASHEETS: book/build.py writes the list from data/accelerators.toml here. -->"


def datasheets_list() -> str:
    """The `datasheets` entry of references.md: each accelerator's recorded source, from the library."""
    from inferlab import get_accelerator, list_accelerators
    items = []
    for name in list_accelerators():
        acc = get_accelerator(name)
        items.append(f"- `{name}` ({acc.description}): {acc.source}")
    return "\n".join(items)


# The smallest font the book renders (CSS px): a wide text output shrinks towards the column, not
# below this, and scrolls inside its own box for the rest (custom.css).
MIN_TEXT_PX = 11
# Advance of one character of a monospace font, in em (DejaVu/Liberation Mono: 0.60), with margin.
MONO_ADVANCE_EM = 0.61


def text_width_css() -> str:
    """One rule per width bucket of convert.width_tag: the font that fits N characters in the column,
    but never under MIN_TEXT_PX (a wider output then scrolls inside its own box).

    myst-nb puts a cell's tags on its container as classes (tag_<tag>); `cqi` is 1 % of the
    output area's width (custom.css makes it a size container); 2.5rem covers padding and border.
    """
    # !important: a folded table's <pre> carries an inline font size (reader.details) that would win.
    rules = ["/* Written by book/build.py from convert.WIDTH_BUCKETS; do not edit. */"]
    for n in convert.WIDTH_BUCKETS[1:]:
        rules.append(f".tag_text-width-{n} div.cell_output pre "
                     f"{{ font-size: clamp({MIN_TEXT_PX}px, calc((100cqi - 2.5rem) / {n * MONO_ADVANCE_EM:.2f}), 0.8rem) !important; }}")
    return "\n".join(rules) + "\n"


def stage_docs(docs: Path, src: Path, notebooks: list[str]) -> list[str]:
    """Every docs/*.md page of the repository, converted (convert.convert_docs_page) into
    <src>/docs/; returns their page names ("docs/<stem>"), sorted by file name."""
    pages = sorted(docs.glob("*.md")) if docs.is_dir() else []
    if not pages:
        return []
    (src / convert.DOCS_DIR).mkdir()
    names = [p.name for p in pages]
    for page in pages:
        try:
            text = convert.convert_docs_page(page.read_text(), page.name, notebooks, names)
        except convert.ConversionError as e:
            sys.exit(f"book: {e}")
        (src / convert.DOCS_DIR / page.name).write_text(text)
    for sub in sorted(docs.iterdir()):  # the pages' images (docs/img/, docs/figures/), at the same relative paths
        if sub.is_dir() and not sub.name.startswith("."):
            shutil.copytree(sub, src / convert.DOCS_DIR / sub.name)
    return [f"{convert.DOCS_DIR}/{p.stem}" for p in pages]


def stage(chapters: Path, errata: Path, src: Path, docs: Path | None = None) -> list[str]:
    """Fill the staging folder; returns the page names in reading order (the reference pages of
    `docs`, default ROOT/docs, last)."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    for name in BOOK_FILES:
        p = HERE / name
        (shutil.copytree if p.is_dir() else shutil.copy2)(p, src / name)
    notebooks = sorted(chapters.glob("*.ipynb"))
    names = [nb.name for nb in notebooks]
    if convert.INDEX_SOURCE not in names:
        sys.exit(f"book: {chapters}/{convert.INDEX_SOURCE} is missing (it becomes index.html)")
    chapter_pages = [convert.stage_name(n) for n in names if n != convert.INDEX_SOURCE]
    reference = stage_docs(ROOT / convert.DOCS_DIR if docs is None else docs, src, names)
    (src / convert.DOWNLOADS).mkdir()
    for nb_path in notebooks:
        page = convert.stage_name(nb_path.name)
        nb = json.loads(nb_path.read_text())
        toc = chapter_pages + list(EXTRA_PAGES) if page == convert.INDEX_PAGE else None
        ref = reference if page == convert.INDEX_PAGE else None
        downloads = [p.name for p in (nb_path, nb_path.with_suffix(".py")) if p.is_file()]
        for name in downloads:
            shutil.copy2(nb_path.parent / name, src / convert.DOWNLOADS / name)
        try:
            out = convert.convert_notebook(nb, nb_path.name, toc=toc, downloads=downloads, reference=ref)
        except convert.ConversionError as e:
            sys.exit(f"book: {e}")
        postprocess.extract_narrow_images(out, src / "_static" / postprocess.NARROW_DIR)
        (src / f"{page}.ipynb").write_text(json.dumps(out, indent=1))
    (src / "errata.md").write_text(convert.convert_errata_page(errata.read_text()))
    (src / "cheatsheet.md").write_text(cheatsheet_page())
    notation = src / "notation.md"
    notation.write_text(convert.unlink_missing_pages(notation.read_text(), names))
    (src / "_static" / "text-widths.css").write_text(text_width_css())
    refs = src / "references.md"
    refs.write_text(refs.read_text().replace(DATASHEETS_MARKER, datasheets_list()))
    return [convert.INDEX_PAGE, *chapter_pages, *EXTRA_PAGES, *reference]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chapters", type=Path, default=ROOT / "chapters")
    ap.add_argument("--errata", type=Path, default=ROOT / "ERRATA.md")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs", help="reference pages (*.md)")
    ap.add_argument("--src", type=Path, default=ROOT / "build" / "book-src", help="staging folder")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "book")
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "cache")
    ap.add_argument("--no-mathjax", action="store_true", help="leave the MathJax assets out")
    ap.add_argument("--no-plotly", action="store_true", help="leave plotly.js out (interactive figures stay static)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    pages = stage(args.chapters, args.errata, args.src, args.docs)
    if not args.no_mathjax:
        n = unpack_mathjax(mathjax_tarball(args.cache), args.src / "_static" / "mathjax")
        print(f"book: MathJax {MATHJAX_VERSION}: {n} files into _static/mathjax/")
    if not args.no_plotly and any(convert.has_interactive(json.loads(nb.read_text()))
                                  for nb in args.chapters.glob("*.ipynb")):
        n = unpack_plotly(args.cache, args.src / "_static")
        print(f"book: plotly.js {PLOTLY_VERSION} ({n:,} bytes) into _static/{PLOTLY_FILE}")
    if args.out.exists():
        shutil.rmtree(args.out)
    from sphinx.cmd.build import build_main
    with warnings.catch_warnings():   # the theme's and myst's use of APIs Sphinx 11 removes: not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        rc = build_main(["-b", "html", "-q", "-W", "--keep-going", "-d", str(args.src / ".doctrees"),
                         str(args.src), str(args.out)])
    if rc:
        return rc
    postprocess.postprocess_dir(args.out)
    print(f"book: {len(pages)} pages in {args.out}/ ({time.perf_counter() - t0:.0f} s); "
          f"open {args.out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
