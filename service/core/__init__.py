"""The pure core: the whole meaning of an assay, with no I/O and no framework.

Its modules live in rooms, each importing only the rooms below it (an import-linter `layers`
contract in pyproject.toml): `system` < `faults` < `trial` < `evidence` < `decision` <
`shards` | `signing`; `errors` and `compiled` sit beside them. Nothing is imported here.
"""
