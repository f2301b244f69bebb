"""The grade verb (``make grade``, ``make gradebook``): nbgrader autograde, feedback and the grades CSV (grade);
nbgrader's executor that runs each notebook in the box and gathers its verdicts (hardened); the gradebook
database checked first (gradebook_file); each LMS's import file (lms_gradebook)."""
