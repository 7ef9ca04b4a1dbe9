"""The pure core: the whole meaning of an assay, with no I/O and no framework."""
