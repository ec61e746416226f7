"""The key services a key pair can live in: AWS KMS (boto3), Vault or OpenBao Transit (hvac), PKCS#11 (python-pkcs11).

Each decrypts with RSA-OAEP, SHA-256 for the hash and MGF1, and turns every failure into ``KeyServiceError``
naming the key and the permission to check. Their client libraries are imported when a provider is built (the
``kms`` extra), so a plugin with key files needs none of them. Google Cloud KMS and Azure Key Vault are not here:
no server of theirs runs offline, so they could not be tested.
"""

from __future__ import annotations

import base64
import threading
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from encryption.errors import KeyPairError, KeyServiceError

PROVIDERS = ("file", "aws-kms", "vault-transit", "pkcs11")


def _missing(provider: str, module: str, e: ImportError) -> KeyPairError:
    return KeyPairError(
        f"provider {provider} needs the Python package {module} ({e}); pip install 'kafka-tiered-storage[kms]'"
    )


class AwsKms:
    """An asymmetric AWS KMS key (KeySpec RSA_2048/3072/4096, KeyUsage ENCRYPT_DECRYPT).

    The plugin's identity needs ``kms:GetPublicKey`` (once per process) and ``kms:Decrypt`` on the key's ARN."""

    provider = "aws-kms"

    def __init__(
        self,
        key: str,
        region: str | None = None,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as e:
            raise _missing(self.provider, "boto3", e) from None
        self.key = key
        self.permission = f"kms:Decrypt and kms:GetPublicKey on {key}"
        self._client = boto3.session.Session().client(
            "kms",
            region_name=region,
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=Config(
                connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 2, "mode": "standard"}
            ),
        )

    def _fail(self, action: str, e: Exception) -> KeyServiceError:
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(e, ClientError):
            code = e.response.get("Error", {}).get("Code", "")
            text = e.response.get("Error", {}).get("Message", "")
            if code in ("AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException"):
                why = f"access denied ({code}: {text}); check {action} on {self.key} in the identity's IAM policy"
            elif code in ("DisabledException", "KMSInvalidStateException"):
                why = f"the key is disabled or pending deletion ({code}: {text}); enable it (or cancel its deletion)"
            elif code == "NotFoundException":
                why = f"the key does not exist ({text}); check the key id and region"
            elif code in ("InvalidCiphertextException", "IncorrectKeyException"):
                return KeyServiceError(
                    f"aws-kms refused the ciphertext ({code}): it was not wrapped for {self.key}", retriable=False
                )
            else:
                why = f"{code}: {text}; check {action} on {self.key}"
            return KeyServiceError(f"aws-kms {action} failed: {why}")
        if isinstance(e, BotoCoreError):
            return KeyServiceError(f"aws-kms {action} failed: the service is unreachable ({e})")
        return KeyServiceError(f"aws-kms {action} failed: {type(e).__name__}: {e}")

    def public_key(self) -> tuple[bytes, str]:
        try:
            reply = self._client.get_public_key(KeyId=self.key)
        except Exception as e:  # botocore's errors, mapped by _fail
            raise self._fail("kms:GetPublicKey", e) from None
        if reply.get("KeyUsage") not in (None, "ENCRYPT_DECRYPT"):
            raise KeyPairError(
                f"aws-kms key {self.key} has KeyUsage {reply.get('KeyUsage')}; ENCRYPT_DECRYPT is needed"
            )
        # An asymmetric KMS key never rotates: its version is always 1 (a new key is a new key pair id).
        return bytes(reply["PublicKey"]), "1"

    def decrypt(self, wrapped: bytes, version: str) -> bytes:
        try:
            reply = self._client.decrypt(
                KeyId=self.key, CiphertextBlob=wrapped, EncryptionAlgorithm="RSAES_OAEP_SHA_256"
            )
        except Exception as e:
            raise self._fail("kms:Decrypt", e) from None
        return bytes(reply["Plaintext"])


class VaultTransit:
    """An RSA key (``rsa-2048``/``rsa-3072``/``rsa-4096``) of a Vault or OpenBao Transit engine.

    The token needs ``read`` on ``<mount>/keys/<key>`` and ``update`` on ``<mount>/decrypt/<key>``."""

    provider = "vault-transit"

    def __init__(
        self, key: str, url: str, token: str, mount: str = "transit", namespace: str | None = None, timeout_s: float = 5
    ) -> None:
        try:
            import hvac
        except ImportError as e:
            raise _missing(self.provider, "hvac", e) from None
        self.key = key
        self.mount = mount
        self.url = url
        self.permission = f"read on {mount}/keys/{key} and update on {mount}/decrypt/{key}"
        self._client = hvac.Client(url=url, token=token, namespace=namespace, timeout=timeout_s)

    def _fail(self, action: str, e: Exception) -> KeyServiceError:
        import hvac.exceptions as hx
        import requests

        where = f"{self.mount}/{action}/{self.key} at {self.url}"
        if isinstance(e, hx.Forbidden | hx.Unauthorized):
            return KeyServiceError(
                f"vault-transit: access denied on {where}; the token's policy needs {self.permission}"
            )
        if isinstance(e, hx.InvalidPath):
            return KeyServiceError(f"vault-transit: {where} does not exist (key deleted or wrong mount): {e}")
        if isinstance(e, hx.InvalidRequest):
            text = str(e)
            if "not found" in text or "no existing key" in text:
                return KeyServiceError(f"vault-transit: the key {self.key} is gone from {self.mount} ({text})")
            if "min_decryption_version" in text or "archived" in text:
                return KeyServiceError(
                    f"vault-transit: this key version is below the key's min_decryption_version ({text}); lower it "
                    f"or re-wrap with kts keys rotate"
                )
            return KeyServiceError(f"vault-transit refused {where}: {text}", retriable=False)
        if isinstance(e, requests.exceptions.RequestException | hx.VaultDown | hx.InternalServerError):
            return KeyServiceError(f"vault-transit: {self.url} is unreachable or failing ({type(e).__name__}: {e})")
        return KeyServiceError(f"vault-transit {where} failed: {type(e).__name__}: {e}")

    def public_key(self) -> tuple[bytes, str]:
        try:
            data = self._client.secrets.transit.read_key(name=self.key, mount_point=self.mount)["data"]
        except Exception as e:
            raise self._fail("keys", e) from None
        if not str(data.get("type", "")).startswith("rsa-"):
            raise KeyPairError(
                f"vault-transit key {self.key} is {data.get('type')!r}; an rsa-2048/3072/4096 key is needed"
            )
        version = str(data["latest_version"])
        pem = data["keys"][version]["public_key"]
        der = serialization.load_pem_public_key(pem.encode()).public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return der, version

    def decrypt(self, wrapped: bytes, version: str) -> bytes:
        ciphertext = f"vault:v{version}:{base64.b64encode(wrapped).decode('ascii')}"
        try:
            reply = self._client.secrets.transit.decrypt_data(
                name=self.key, ciphertext=ciphertext, mount_point=self.mount
            )
        except Exception as e:
            raise self._fail("decrypt", e) from None
        return base64.b64decode(reply["data"]["plaintext"])


class Pkcs11:
    """An RSA key pair on a PKCS#11 token (an HSM), found by its label; the private key needs CKA_DECRYPT.

    One session, opened at first use and logged in with the user PIN, serves every call (under a lock)."""

    provider = "pkcs11"

    def __init__(self, key: str, library: str, token_label: str | None, slot: int | None, pin: str) -> None:
        try:
            import pkcs11
        except ImportError as e:
            raise _missing(self.provider, "python-pkcs11", e) from None
        self.key = key
        self.library = library
        self.token_label = token_label
        self.slot = slot
        token = token_label or f"in slot {slot}"
        self.permission = f"the user PIN of token {token} and CKA_DECRYPT on the private key labelled {key}"
        self._pin = pin
        self._pkcs11 = pkcs11
        self._session: Any = None
        self._lock = threading.Lock()

    def _open(self) -> Any:
        if self._session is None:
            lib = self._pkcs11.lib(self.library)
            if self.token_label is not None:
                token = lib.get_token(token_label=self.token_label)
            else:
                slots = [s for s in lib.get_slots(token_present=True) if s.slot_id == self.slot]
                if not slots:
                    raise KeyServiceError(f"pkcs11: no token in slot {self.slot} of {self.library}")
                token = slots[0].get_token()
            try:
                self._session = token.open(user_pin=self._pin)
            except self._pkcs11.exceptions.UserAlreadyLoggedIn:
                # The login is the process's, not the session's: another pair on this token logged in already.
                self._session = token.open()
        return self._session

    def _fail(self, action: str, e: Exception) -> KeyServiceError:
        px = self._pkcs11.exceptions
        self._session = None  # opened again on the next call
        if isinstance(e, px.PinIncorrect | px.PinLenRange | px.UserNotLoggedIn | px.PinExpired | px.PinLocked):
            return KeyServiceError(f"pkcs11 {action}: access denied ({type(e).__name__}); check {self.permission}")
        if isinstance(e, px.NoSuchKey | px.MultipleObjectsReturned):
            return KeyServiceError(
                f"pkcs11 {action}: {type(e).__name__} for label {self.key} (key deleted or labels not unique)"
            )
        if isinstance(e, px.NoSuchToken | px.TokenNotPresent | px.TokenNotRecognised | px.DeviceRemoved):
            return KeyServiceError(f"pkcs11 {action}: the token is unreachable ({type(e).__name__})")
        if isinstance(e, px.EncryptedDataInvalid | px.EncryptedDataLenRange):
            return KeyServiceError(
                f"pkcs11 {action}: the token refused the ciphertext ({type(e).__name__})", retriable=False
            )
        return KeyServiceError(f"pkcs11 {action} failed: {type(e).__name__}: {e}")

    def public_key(self) -> tuple[bytes, str]:
        p = self._pkcs11
        with self._lock:
            try:
                pub = self._open().get_key(
                    object_class=p.ObjectClass.PUBLIC_KEY, key_type=p.KeyType.RSA, label=self.key
                )
                n = int.from_bytes(pub[p.Attribute.MODULUS], "big")
                e = int.from_bytes(pub[p.Attribute.PUBLIC_EXPONENT], "big")
            except KeyServiceError:
                raise
            except Exception as exc:
                raise self._fail("read public key", exc) from None
        der = (
            rsa.RSAPublicNumbers(e, n)
            .public_key()
            .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        return der, "1"

    def decrypt(self, wrapped: bytes, version: str) -> bytes:
        p = self._pkcs11
        with self._lock:
            try:
                priv = self._open().get_key(
                    object_class=p.ObjectClass.PRIVATE_KEY, key_type=p.KeyType.RSA, label=self.key
                )
                return bytes(
                    priv.decrypt(
                        wrapped,
                        mechanism=p.Mechanism.RSA_PKCS_OAEP,
                        mechanism_param=(p.Mechanism.SHA256, p.MGF.SHA256, None),
                    )
                )
            except KeyServiceError:
                raise
            except Exception as exc:
                raise self._fail("decrypt", exc) from None
