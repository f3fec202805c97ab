"""Context management: the tool-output budget, the /context report and compaction."""
