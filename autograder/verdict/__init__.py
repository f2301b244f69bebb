"""The trusted side of grading: every score is decided here, in a process that never runs student code.

``channel`` talks to the grading kernel (handles to the student's objects, plain data back);
``notebook`` reads a submission against the lab's source (who wrote which cell, what each binds and reads);
``cells`` runs one graded cell here, in a namespace where the student's names are remote and the lab's given
names are rebuilt from the release, and returns its verdict; ``provenance`` reads the submitted text for code
that reaches the reference or the grading machinery; ``secrets`` keeps hidden-test and grader text out of
anything that leaves grading; ``kernels`` builds lab 06's kernels from their text in a compile box
(``autograder.agent.compile_box``), after ``triton_text`` has read each kernel's whole text as Triton.
"""
