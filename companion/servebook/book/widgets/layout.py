"""How the book's widgets are laid out: labelled controls that wrap to the column, above the text they compute.

A control's label is an HTML widget beside it, never the control's ``description``.
The script that draws widgets on a static page (ipywidgets 8.1's HTML manager) typesets
every description, ``Label`` and ``HTMLMath`` with MathJax 2's API
(``MathJax.Hub.Queue``) when the page has no other typesetter; a MathJax 3 page such as
Quarto's has no ``MathJax.Hub``, so each one logs a TypeError.  An HTML widget's value is
not typeset, so the book's widgets use no description, ``Label`` or ``HTMLMath`` at all.

The controls sit in one row that wraps, each of a fixed width, so a panel is never wider
than the page's column; the text below them is at most as wide as the column (a longer
line scrolls inside it, as the page's other output blocks do).
"""

from __future__ import annotations

import html
from collections.abc import Callable

import ipywidgets as w

LABEL_WIDTH = "100px"
CONTROL_WIDTH = "170px"
BUTTON_WIDTH = "80px"     # one button of a ToggleButtons control


def sized(control: w.Widget) -> w.Widget:
    """``control`` at the panel's width (ToggleButtons: per button), whatever its kind."""
    if isinstance(control, w.ToggleButtons):
        control.style.button_width = BUTTON_WIDTH
    else:
        control.layout.width = CONTROL_WIDTH
    return control


class Panel(w.VBox):
    """Named controls, each beside its label, in a row that wraps, above the text they compute.

    ``controls`` maps a name to ``(label, control)``; :attr:`controls` then maps the
    name to the control, and :attr:`output` is the HTML widget that shows the text.
    """

    def __init__(self, controls: dict[str, tuple[str, w.Widget]]) -> None:
        labelled = [w.HBox([w.HTML(html.escape(label), layout=w.Layout(width=LABEL_WIDTH)), sized(control)])
                    for label, control in controls.values()]
        output = w.HTML(layout=w.Layout(max_width="100%", overflow="auto"))
        super().__init__([w.Box(labelled, layout=w.Layout(flex_flow="row wrap", max_width="100%")), output],
                         layout=w.Layout(max_width="100%"))
        self.controls = {name: control for name, (_, control) in controls.items()}
        self.output = output

    def show(self, compute: Callable[[], str]) -> None:
        """Show the text ``compute`` returns, or why it cannot compute (bad input never raises here)."""
        try:
            text = compute()
        except (ValueError, TypeError, ZeroDivisionError) as error:
            text = f"cannot compute: {error}"
        self.output.value = f"<pre>{html.escape(text)}</pre>"

    def follow(self, refresh: Callable[..., None]) -> None:
        """Call ``refresh`` whenever a control's value changes, and once now."""
        for control in self.controls.values():
            control.observe(refresh, names="value")
        refresh()


def typesetting(widget: w.Widget) -> list[w.Widget]:
    """The widgets in ``widget``'s tree that the page script would typeset with MathJax 2 (none, in the book)."""
    found = []
    if isinstance(widget, (w.Label, w.HTMLMath)) or getattr(widget, "description", ""):
        found.append(widget)
    for child in getattr(widget, "children", ()):
        found += typesetting(child)
    return found
