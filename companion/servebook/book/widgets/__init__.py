"""Interactive calculators for the book, built on the same functions as its figures and answers.

One module per topic (``kv``, ``quant``, ``capacity``, ...).  Each offers a pure
function that computes the calculator's text from its inputs, which the tests
check, and a function returning the ipywidgets widget that calls it.
"""
