"""The site as Quarto builds it, checked without Quarto: pandoc (from pypandoc-binary) runs the
book's own filters and citeproc on every page, as ``quarto render`` does.

- every page's citations resolve against ``references.bib``, and titles keep their case;
- the Colab badge is an inline image with alt text, never a figure; only the GPU lab asks for a GPU;
- the "Cite this page" block the filter writes is the one the preview writes (tools/citeblock.py);
- the exercise pages are lettered appendices, and every chapter's pointer to them resolves.
"""

from __future__ import annotations

import functools
import html
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from tools import citations, citeblock, pages, quarto, render

pypandoc = pytest.importorskip("pypandoc", reason="pandoc ships in pypandoc-binary (the book extra)")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_quarto.yml").read_text(encoding="utf-8"))
OUTLINE = pages.book_outline(ROOT)
PAGES = [page.path for page in OUTLINE]
CROSS_REFERENCE = re.compile(r"^(?:fig|sec|tbl|eq)-")
NOT_FOUND = re.compile(r"Citeproc: citation (\S+) not found")


@functools.cache
def pandoc_html(path: str, tmp: Path) -> tuple[str, str]:
    """A page as pandoc renders it with the book's filters and citeproc: (standalone HTML, warnings).

    Quarto's engine hands pandoc executed cells as fenced code blocks; ```{python} is not pandoc's
    syntax, so the page's cells are written as ``` {.python} first.
    """
    source = (ROOT / path).read_text(encoding="utf-8")
    copy = tmp / path
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(re.sub(r"^```\{python\}", "``` {.python}", source, flags=re.M), encoding="utf-8")
    done = subprocess.run(
        [pypandoc.get_pandoc_path(), path, "-f", "markdown", "-s", "-t", "html", "--syntax-highlighting=none",
         f"--metadata-file={ROOT / '_quarto.yml'}", f"--bibliography={ROOT / 'references.bib'}", "--citeproc",
         *[f"--lua-filter={ROOT / f}" for f in CONFIG["filters"]]],
        cwd=tmp, capture_output=True, text=True, check=True)
    return done.stdout, done.stderr


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pandoc")
    return lambda path: pandoc_html(path, tmp)


@pytest.mark.parametrize("path", PAGES)
def test_every_citation_of_the_page_resolves(path, rendered):
    _, warnings = rendered(path)
    unresolved = sorted({key for key in NOT_FOUND.findall(warnings) if not CROSS_REFERENCE.match(key)})
    assert not unresolved, f"{path}: citations not in references.bib: {unresolved}"


def _title_tokens_needing_braces(title: str) -> list[str]:
    """Words a title-casing style would change although they are names: a code path or identifier
    (a dot, slash or underscore inside), a lower-case name that opens the title ("torchao: ...")."""
    outside = re.sub(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", " ", title)
    tokens = [t for t in re.findall(r"[\w./\\-]+", outside) if re.search(r"\w[./_]\w", t.replace("\\_", "_"))]
    opening = re.match(r"([a-z][\w.-]*):", title)
    return tokens + ([opening.group(1)] if opening else [])


def test_bibliography_titles_keep_their_case():
    text = (ROOT / "references.bib").read_text(encoding="utf-8")
    unprotected = {}
    for match in re.finditer(r"@\w+\{([^,]+),.*?^\s*title\s*=\s*\{(.*?)\},?\s*$", text, re.S | re.M):
        tokens = _title_tokens_needing_braces(match.group(2))
        if tokens:
            unprotected[match.group(1)] = tokens
    assert not unprotected, f"titles whose names lose their case without braces: {unprotected}"
    everything = "---\nnocite: '@*'\n---\n"
    shown = pypandoc.convert_text(everything, "plain", format="markdown", extra_args=[
        "--citeproc", f"--bibliography={ROOT / 'references.bib'}", "--wrap=none"])
    for key in citations.read_bibliography(ROOT / "references.bib"):
        for protected in re.findall(r"\{([^{}\\]+)\}", re.search(
                rf"@\w+\{{{re.escape(key)},.*?title\s*=\s*\{{(.*?)\}},?\s*$", text, re.S | re.M).group(1)):
            assert protected in shown, f"{key}: '{protected}' is not shown as written"
    assert "Https://" not in shown, "an address written as text is capitalised: give it as url = {...}"


def test_the_colab_badge_is_an_inline_image_with_alt_text_and_only_the_lab_asks_for_a_gpu(rendered):
    badged = {path: quarto.colab_badge((ROOT / path).read_text(encoding="utf-8")) for path in PAGES}
    badged = {path: badge for path, badge in badged.items() if badge}
    assert {p.split("/")[0] for p in badged} == {"chapters", "exercises"}
    assert {path for path, badge in badged.items() if badge.gpu} == {"chapters/gpu-lab.qmd"}
    for path, badge in badged.items():
        page, _ = rendered(path)
        image = re.search(r'<p><a\s+href="[^"]+"[^>]*>\s*<img src="[^"]+colab-badge\.svg" alt="([^"]+)"', page)
        assert image and image.group(1) == badge.alt, f"{path}: the badge is not an inline image with alt text"
        assert "<figure" not in page.split("colab-badge.svg")[0], f"{path}: the badge was made a figure"
    gpu = pypandoc.convert_file(str(ROOT / "chapters/gpu-lab.qmd"), "native", format="markdown")
    assert re.search(r'Link\s*\(\s*""\s*,\s*\[\s*\]\s*,\s*\[\s*\(\s*"accelerator"\s*,\s*"GPU"\s*\)', gpu)


def _bibtex_of(page: str) -> str:
    block = re.search(r'<pre class="bibtex"><code>(.*?)</code></pre>', page.split('id="cite-this-page"')[-1], re.S)
    return html.unescape(block.group(1)) if block else ""


@pytest.mark.parametrize("path", PAGES)
def test_the_cite_block_is_the_one_the_preview_writes(path, rendered):
    page, _ = rendered(path)
    source = (ROOT / path).read_text(encoding="utf-8")
    entry = citeblock.page_entry(CONFIG, path, source)
    assert _bibtex_of(page) == citeblock.bibtex(entry)
    figures = re.findall(r'data-cites="(fig-[\w-]+)"', page.split('id="cite-this-page"')[1])
    assert figures == citeblock.figure_labels(source)
    assert entry.url.startswith(CONFIG["book"]["site-url"]) and entry.url.endswith(".html")
    title = re.search(r'<meta name="citation_title" content="([^"]*)"', page).group(1)
    assert title == entry.title and not re.search(r"[{}#*`<>]", html.unescape(title)), title


def test_the_preview_shows_the_cite_block(tmp_path):
    results = [type("Result", (), {"path": ROOT / "chapters/kv-cache.qmd", "seconds": 0.0,
                                   "notebook": pages.read_page(ROOT / "chapters/kv-cache.qmd")})()]
    from tools import preview

    preview.write(ROOT, results, tmp_path)
    shown = (tmp_path / "chapters" / "kv-cache.html").read_text(encoding="utf-8")
    assert "Cite this page" in shown and "servebook2026-chapters-kv-cache" in shown
    assert 'href="#fig-kv-growth">Figure' in shown.split("Cite this page")[1]


def test_exercises_are_lettered_appendices_and_every_chapter_points_to_its_own():
    by_path = {page.path: page for page in OUTLINE}
    exercises = [p for p in PAGES if p.startswith("exercises/")]
    assert exercises and all(by_path[p].appendix and by_path[p].number.isalpha() for p in exercises)
    chapters = [p for p in PAGES if p.startswith("chapters/")]
    assert [by_path[p].number for p in chapters if by_path[p].number] == [
        str(i) for i in range(1, 1 + sum(1 for p in chapters if by_path[p].number))]
    targets = render.find_targets((page, pages.read_page(ROOT / page.path).cells)
                                  for page in OUTLINE if page.path.startswith(("chapters/", "exercises/")))
    for path in chapters:
        pointer = re.search(r"Exercises for this chapter[^@]*@(sec-ex-[\w-]+)", (ROOT / path).read_text())
        if pointer is None:
            continue  # the GPU lab has no exercises
        target = targets[pointer.group(1)]
        assert target.page == Path(path).as_posix().replace("chapters/", "exercises/").replace(".qmd", ".html")
        assert target.text == f"Appendix {by_path[target.page.replace('.html', '.qmd')].number}"


def test_site_features_are_configured():
    html_format, book = CONFIG["format"]["html"], CONFIG["book"]
    assert set(html_format["theme"]) == {"light", "dark"} and html_format["lightbox"]
    assert html_format["description-meta"] and book["description"]
    for asset in (book["favicon"], book["cover-image"]):
        assert (ROOT / asset).exists(), asset
    footer = " ".join(str(v) for v in book["page-footer"].values())
    assert "CC BY 4.0" in footer and "MIT" in footer and (ROOT / "LICENSE-text").exists()
    assert CONFIG["format"]["pdf"]["fig-format"] in ("png", "pdf")
    assert CONFIG["google-scholar"] is False, "the cite-this filter writes the Google Scholar tags"
    assert all((ROOT / f).exists() for f in CONFIG["filters"])


def test_the_screenshot_script_says_so_where_there_is_no_browser(tmp_path, monkeypatch, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("screenshot_preview", ROOT / "scripts/screenshot_preview.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (tmp_path / "site" / "chapters").mkdir(parents=True)
    (tmp_path / "site" / "chapters" / "kv-cache.html").write_text("<p>page</p>")
    monkeypatch.setattr(script, "with_playwright", lambda *args: False)
    monkeypatch.setattr(script, "BROWSERS", ())
    assert script.main([str(tmp_path / "site"), "--out", str(tmp_path / "shots")]) == 0
    assert "SKIPPED: no headless browser" in capsys.readouterr().out
    assert not list((tmp_path / "shots").iterdir())
    page = tmp_path / "site" / "chapters" / "kv-cache.html"
    assert script.shot_name(tmp_path / "site", page) == "chapters-kv-cache.png"


def test_the_cite_block_needs_only_the_citation_settings_where_a_filter_sees_no_book(tmp_path):
    """Whether Quarto hands a filter the ``book:`` settings or not, the entry is the same."""
    without_book = {key: value for key, value in CONFIG.items() if key != "book"}
    (tmp_path / "settings.yml").write_text(yaml.safe_dump(without_book), encoding="utf-8")
    path = "appendices/units.qmd"
    page = subprocess.run(
        [pypandoc.get_pandoc_path(), path, "-t", "html", "--syntax-highlighting=none",
         f"--metadata-file={tmp_path / 'settings.yml'}", f"--lua-filter={ROOT / 'filters/cite-this.lua'}"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout
    source = (ROOT / path).read_text(encoding="utf-8")
    assert _bibtex_of(page) == citeblock.bibtex(citeblock.page_entry(CONFIG, path, source))
