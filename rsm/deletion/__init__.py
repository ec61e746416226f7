"""The one authority for every deletion the plugin infers: the rules (which signals each kind of deletion needs,
how long it waits, whether it can be undone) and the quarantine that makes deletions reversible.

Kafka's own deletes (``deleteLogSegmentData``, retention) do not come here: the broker decided them.
"""
