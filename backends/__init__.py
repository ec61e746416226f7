"""Object stores behind the ``StorageBackend`` protocol: filesystem, S3, GCS and Azure Blob, with their retry
policy, streaming helpers and per-operation counters. The lowest layer: it imports no other package of ours.

Its failures are its own (``StorageBackendException``, ``KeyNotFound``, ``InvalidRange``); the plugin turns
them into Kafka's exceptions. It also holds ``configdef``, the config-declaration tool (``ConfigDef``,
``ConfigKey``, ``ConfigException``): every layer declares and validates its keys with it, so it has to live in
the layer everything else may import.
"""
