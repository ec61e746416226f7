"""The encryption layer's own failures. The plugin turns them into its public exceptions at its boundary:
``DecryptionError`` into ``CorruptDataException``, ``KeyRingError`` into ``KeyRingException`` and
``KeyPairError`` into ``ConfigException``, each time naming the segment or the configuration key."""

from __future__ import annotations


class EncryptionError(Exception):
    """Base of every failure of this layer."""


class DecryptionError(EncryptionError):
    """Stored bytes failed AES-GCM authentication or are too short to hold an IV and a tag."""


class KeyRingError(EncryptionError):
    """A stored data key cannot be unwrapped: unknown key pair, wrong private key, malformed field."""


class KeyPairError(EncryptionError):
    """A configured key pair is unusable: bad PEM, mismatched halves, too small for OAEP-SHA3-512, bad id."""


class KeyServiceError(KeyRingError):
    """A key service did not unwrap a data key: unreachable, access denied, key disabled or deleted.

    ``retriable`` is true when the same call may succeed later (the service comes back, a permission is granted,
    the key is enabled again); false when the service says the ciphertext is not for this key."""

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class KeyServiceLoginError(KeyServiceError):
    """A key service refused the plugin's credentials in a way that trying again makes worse: a PKCS#11 token's
    user PIN is wrong, expired or locked (tokens lock the PIN after a few failed logins). Never retriable: no
    login is tried again until the plugin is configured with new credentials."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message, retriable=False)
