"""The course on a local JupyterHub (`make hub`): accounts, the per-role Jupyter settings, the hub's config.

Grading stays in ``autograder.pipeline``; this package only starts and describes the hub.
"""
