"""How the book is built: executing pages, the HTML preview, Colab notebooks.

Not part of the ``servebook`` wheel: readers import the companion, the
repository builds the book.  Run from the repository root, e.g.
``python -m tools.build``.
"""
