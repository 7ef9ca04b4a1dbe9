"""How an assay runs: its shards and keys, slots, and the serial, slotted and sequential
executors that turn a plan into shard results and a report. Above `decision`; independent of
`signing`."""
