"""What operators run against a store, beside the plugin: garbage collection, reconciliation with the cluster's
record of tiered segments (and the Kafka client that reads it), and key rotation.

The plugin itself (``rsm.core``) never imports this package; ``rsm.cli``'s commands are thin wrappers over it.
Every deletion these tools infer is decided by ``rsm.deletion``.
"""
