"""Encryption in Aiven's format: AES-256-GCM per chunk under a per-segment data key, and the key ring of RSA
pairs that wrap data keys with OAEP-SHA3-512. It may import ``backends`` only; its failures
(``encryption.errors``) are translated by the plugin into ``CorruptDataException``, ``KeyRingException`` and
``ConfigException``."""
