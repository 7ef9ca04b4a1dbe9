"""How an assay runs: its shards and keys, slots, and the one scheduler that turns every plan
(fixed, sequential, paper mode) into shard results and a report, serially on one slot. Above
`decision`; independent of `signing`."""
