"""Tables derived from the captures, beside them in the store: the full-text search index, replay
links and the cache minimums learned from reported usage. Rebuildable by `ctxscope reindex`."""
