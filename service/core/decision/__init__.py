"""The typed report, the gate's decision on it with every reason, and the merge of shard results
that builds both. Above `evidence`."""
