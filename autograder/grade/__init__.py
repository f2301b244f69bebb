"""The grade verb (``make grade``, ``make gradebook``): nbgrader autograde in the box, feedback and the grades CSV
(grade), the gradebook database checked first (gradebook_file), each LMS's import file (lms_gradebook)."""
