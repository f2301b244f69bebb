"""What an instructor runs: collect submissions, repair them, grade a class, report, make the handout."""
