"""Grading where a course already grades: thin adapters over the instructor's verbs (``autograder.collect``, ``autograder.grade``) (no second grader).

- ``one_upload``: one student's upload graded as ``make collect`` + ``make grade`` grade a class;
- ``gradescope``: the autograder zip and its ``run_autograder`` (Gradescope's results.json);
- ``prairielearn``: an external-grader question and its entrypoint (PrairieLearn's results.json);
- ``bundle``: the files of the course a platform's grader carries.
"""
