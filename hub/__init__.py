"""The course on a local JupyterHub (`make hub`): accounts, the per-role Jupyter settings, the hub's config.

Grading stays in the instructor's verbs (``autograder.collect``, ``autograder.grade``); this package only starts and describes the hub.
"""
