"""The trusted side of grading: every score is decided here, in a process that never runs student code.

``channel`` talks to the grading kernel (handles to the student's objects, plain data back);
``namespace`` builds the world a graded cell's text runs in (the student's names remote, the lab's
given names rebuilt here from the release); ``cells`` runs one graded cell and returns its verdict;
``provenance`` reads the submitted text for code that reaches the reference or the grading machinery;
``compile_box`` builds a Triton kernel from its submitted source in a fresh box.
"""
