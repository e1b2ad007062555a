"""Interactive calculators for the book's notebooks, built on the same functions as its figures and answers.

One module per topic (``kv``, ``quant``, ``capacity``, ``paging``).  Each offers a pure
function that computes the calculator's text from its inputs, which the tests
check, and a function returning the ipywidgets widget that calls it: a
:class:`~servebook.book.widgets.layout.Panel` of labelled controls (``layout``
says why no control has a description).  On the web site, the KV-cache
calculator and the capacity planner run in the browser instead
(:mod:`servebook.book.calculators`).
"""
