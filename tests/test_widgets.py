"""The book's widgets on a page: nothing the page script typesets, a width that wraps, menus that show a value."""

import html

import pytest

pytest.importorskip("ipywidgets")

import ipywidgets as w  # noqa: E402

from servebook.book.widgets import capacity, kv, layout, paging, quant  # noqa: E402

BUILDERS = [kv.kv_calculator, capacity.capacity_planner, paging.paging_explorer, quant.quant_explorer]


def tree(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from tree(child)


@pytest.mark.parametrize("build", BUILDERS, ids=lambda build: build.__name__)
def test_no_widget_is_typeset_with_mathjax_2(build):
    # A description, a Label or an HTMLMath is typeset with MathJax.Hub on a static page: a TypeError under MathJax 3.
    panel = build()
    assert layout.typesetting(panel) == []
    labels = [child.children[0].value for child in panel.children[0].children]
    assert len(labels) == len(panel.controls) and all(labels)  # every control still has its label, as HTML


@pytest.mark.parametrize("build", BUILDERS, ids=lambda build: build.__name__)
def test_controls_wrap_to_the_column(build):
    panel = build()
    row = panel.children[0]
    assert row.layout.flex_flow == "row wrap" and row.layout.max_width == "100%"
    assert panel.layout.max_width == "100%" and panel.output.layout.max_width == "100%"
    assert panel.output.layout.overflow == "auto"  # a line longer than the column scrolls inside the text
    for control in panel.controls.values():
        if isinstance(control, w.ToggleButtons):
            assert control.style.button_width == layout.BUTTON_WIDTH
        else:
            assert control.layout.width == layout.CONTROL_WIDTH


def test_typesetting_finds_what_the_page_script_would_typeset():
    described = w.VBox([w.HBox([w.IntText(description="n")]), w.Label("x"), w.HTMLMath("$x$"), w.HTML("y")])
    assert [type(found).__name__ for found in layout.typesetting(described)] == ["IntText", "Label", "HTMLMath"]


@pytest.mark.parametrize("build", BUILDERS, ids=lambda build: build.__name__)
def test_every_menu_opens_on_a_value(build):
    # A Dropdown whose value is None shows an empty box (the INT4 group menu did).
    for control in build().controls.values():
        if isinstance(control, w.Dropdown):
            assert control.index is not None and control.label


def test_the_int4_group_menu_says_none_and_plans_with_groups():
    planner = capacity.capacity_planner()
    groups = planner.controls["group_size"]
    assert groups.label == "none" and groups.value == 0
    planner.controls["weights"].value = "int4"
    assert planner.output.value == f"<pre>{html.escape(capacity.capacity_text(weights='int4'))}</pre>"
    groups.value = 128
    assert "(groups of 128)" in planner.output.value
    assert "(groups of 128)" in capacity.capacity_text(weights="int4", group_size=128)


def test_the_paging_explorer_names_the_model_as_the_reader_knows_it():
    explorer = paging.paging_explorer()
    assert dict(explorer.controls["model"].options)["Llama-2-13B"] == "llama-2-13b"
    assert "tokens on Llama-2-13B (fp16)" in explorer.output.value
    explorer.controls["block_size"].value = 128
    assert "blocks of 128" in explorer.output.value


def test_a_panel_shows_why_it_cannot_compute():
    explorer = paging.paging_explorer()
    explorer.controls["n_tokens"].value = 3000  # longer than max_len
    assert "<pre>cannot compute: " in explorer.output.value and "max_len" in explorer.output.value
