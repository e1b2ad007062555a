"""How the book is built: executing pages, the Colab notebooks, the HTML preview, the API reference.

Not part of the ``servebook`` wheel: readers import the companion, the
repository builds the book.  Run from the repository root, e.g.
``python -m tools.build``.
"""
