"""Editions of the course package: the copies a class's handout and the grading boxes carry, in which a
lab's TODOs (and every later lab's) have no implementation (``manifest``: what; ``build``: how; ``routes``: what
else in the package computes it)."""
