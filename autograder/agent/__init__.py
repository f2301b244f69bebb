"""What runs inside the grading box, beside the student's code: the kernel's end of the grading channel.

The trusted grader (``autograder.verdict``) decides every score; this package only answers its
questions about the student's objects (``serve``), in the plain data of ``wire``. It imports nothing
of the graders, and nothing it says is believed beyond "this is what the student's code did".
"""
