"""The collect verb (``make collect``): read an LMS export or folders safely (entries), decide whose each entry is
(entry_names), repair each notebook against its source (repair) and write one submission per student (collect)."""
