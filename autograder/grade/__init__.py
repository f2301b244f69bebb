"""The grade verb (``make grade``, ``make gradebook``): nbgrader autograde, feedback and the grades CSV (grade);
nbgrader's executor that runs each notebook in the box and gathers its verdicts (hardened), and the pieces it wires:
the notebook read against its source (submission), a box's edition, reads and isolation probe (lab_boxes), the
kernels' manager and spares (boxed_kernels), code run in a kernel unrecorded (silent_runs), the graded cells decided
(graded_cells) in the notebook's kernel or a part's own box (part_boxes), lab 06's compile box (compile_box), what
a limit shows (cell_limits), what a provenance finding costs (findings), what leaves grading (grading_record) and
where the time went (timing); the gradebook database checked first (gradebook_file); each LMS's import file
(lms_gradebook)."""
