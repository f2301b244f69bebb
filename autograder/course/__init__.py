"""What every part of the grading side reads about the course, and nothing else: ``layout`` (its folders, from
``nbgrader_config.py``), ``model`` (what a graded lab is: TODOs, parts, cells; each lab declares one in
``autograder/labs/``) and ``notebook`` (what a cell is to grading). It imports nothing else of ``autograder``."""
