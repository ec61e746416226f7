"""The key services a key pair can live in: AWS KMS (boto3), Vault or OpenBao Transit (hvac), PKCS#11 (python-pkcs11).

Each decrypts with RSA-OAEP, SHA-256 for the hash and MGF1, and turns every failure into ``KeyServiceError``
naming the key and the permission to check. Their client libraries are imported when a provider is built (the
``kms`` extra), so a plugin with key files needs none of them. Google Cloud KMS and Azure Key Vault are not here:
no server of theirs runs offline, so they could not be tested.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from encryption.errors import KeyPairError, KeyServiceError, KeyServiceLoginError

log = logging.getLogger(__name__)

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

    The token needs ``read`` on ``<mount>/keys/<key>`` and ``update`` on ``<mount>/decrypt/<key>``. A token from
    ``token_file`` (Vault Agent renews tokens by rewriting that file) is read again when the file changes, and when
    Vault refuses a call (403): the call is then made once more with the new token."""

    provider = "vault-transit"

    def __init__(
        self,
        key: str,
        url: str,
        token: str | None,
        mount: str = "transit",
        namespace: str | None = None,
        timeout_s: float = 5,
        token_file: str | None = None,
    ) -> None:
        try:
            import hvac
        except ImportError as e:
            raise _missing(self.provider, "hvac", e) from None
        if token is None and token_file is None:
            raise KeyPairError(f"vault-transit key {key}: give a token or a token file")
        self.key = key
        self.mount = mount
        self.url = url
        self.token_file = token_file
        self.permission = f"read on {mount}/keys/{key} and update on {mount}/decrypt/{key}"
        self._file_stamp: tuple[int, int, int] | None = None
        self._token_lock = threading.Lock()
        self._client = hvac.Client(url=url, token=token, namespace=namespace, timeout=timeout_s)
        if token_file is not None:
            self._reload_token(force=True)

    def _reload_token(self, force: bool = False) -> bool:
        """Read the token file again if it changed (or ``force``); whether the token is now another one."""
        assert self.token_file is not None
        with self._token_lock:
            try:
                st = os.stat(self.token_file)
                stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
                if not force and stamp == self._file_stamp:
                    return False
                token = Path(self.token_file).read_text().strip()
            except OSError as e:
                raise KeyServiceError(
                    f"vault-transit: cannot read the token file {self.token_file} ({e.strerror}); check that it "
                    f"exists and the broker's user may read it (Vault Agent writes it)"
                ) from None
            self._file_stamp = stamp
            if not token:
                raise KeyServiceError(f"vault-transit: the token file {self.token_file} is empty")
            changed = token != self._client.token
            self._client.token = token
            return changed

    def _with_token(self, action: str, call: Callable[[], Any]) -> Any:
        """``call`` with the current token; on 403, once more if the token file holds another token by then."""
        import hvac.exceptions as hx

        if self.token_file is not None:
            self._reload_token()
        try:
            return call()
        except hx.Forbidden as e:
            if self.token_file is None or not self._reload_token(force=True):
                raise self._fail(action, e) from None
            log.info("vault-transit: %s refused the token; retrying with the new one of %s", self.url, self.token_file)
        except Exception as e:
            raise self._fail(action, e) from None
        try:
            return call()
        except Exception as e:
            raise self._fail(action, e) from None

    def _fail(self, action: str, e: Exception) -> KeyServiceError:
        import hvac.exceptions as hx
        import requests

        where = f"{self.mount}/{action}/{self.key} at {self.url}"
        if isinstance(e, hx.Forbidden | hx.Unauthorized):
            source = f"the token of {self.token_file}" if self.token_file else "the token"
            return KeyServiceError(
                f"vault-transit: access denied on {where}; {source} must be valid and its policy needs "
                f"{self.permission}"
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
        data = self._with_token(
            "keys", lambda: self._client.secrets.transit.read_key(name=self.key, mount_point=self.mount)["data"]
        )
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
        reply = self._with_token(
            "decrypt",
            lambda: self._client.secrets.transit.decrypt_data(
                name=self.key, ciphertext=ciphertext, mount_point=self.mount
            ),
        )
        return base64.b64decode(reply["data"]["plaintext"])


# PKCS#11 return values of C_Login (PKCS#11 v2.40, section 5.1) and the user type of a normal user.
CKU_USER = 1
CKR_OK = 0
CKR_USER_ALREADY_LOGGED_IN = 0x100
PIN_REFUSALS = {
    0xA0: "CKR_PIN_INCORRECT",
    0xA1: "CKR_PIN_INVALID",
    0xA2: "CKR_PIN_LEN_RANGE",
    0xA3: "CKR_PIN_EXPIRED",
    0xA4: "CKR_PIN_LOCKED",
}
CKR_PIN_LOCKED = 0xA4


class Pkcs11:
    """An RSA key pair on a PKCS#11 token (an HSM), found by its label; the private key needs CKA_DECRYPT.

    One session, opened at first use and logged in with the user PIN, serves every call (under a lock). A session
    that fails is closed before another is opened. A PIN the token refuses (wrong, expired, locked) is tried once:
    later calls fail with the same ``KeyServiceLoginError`` without asking the token, because tokens lock the user
    PIN after a few failed logins; configuring the plugin again (a new instance) tries a PIN again."""

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
        self.token_name = f"{token_label!r}" if token_label is not None else f"in slot {slot}"
        self.permission = f"the user PIN of token {self.token_name} and CKA_DECRYPT on the private key labelled {key}"
        self._pin = pin
        self._pkcs11 = pkcs11
        self._session: Any = None
        self._refused: KeyServiceLoginError | None = None
        self._lock = threading.Lock()

    def _token(self) -> Any:
        lib = self._pkcs11.lib(self.library)
        if self.token_label is not None:
            return lib.get_token(token_label=self.token_label)
        slots = [s for s in lib.get_slots(token_present=True) if s.slot_id == self.slot]
        if not slots:
            raise KeyServiceError(f"pkcs11: no token in slot {self.slot} of {self.library}")
        return slots[0].get_token()

    def _login(self, session: Any) -> int:
        """C_Login of the user on ``session``: its return value. Called through the library's own C_Login, as
        python-pkcs11 logs in only inside ``Token.open``, where a refused PIN leaves the new session open."""
        import ctypes

        c_login = ctypes.CDLL(self.library).C_Login  # the library python-pkcs11 loaded: dlopen gives the same one
        c_login.argtypes = [ctypes.c_ulong, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_ulong]
        c_login.restype = ctypes.c_ulong
        pin = self._pin.encode("utf-8")
        return int(c_login(session.handle, CKU_USER, pin, len(pin)))

    def _open(self) -> Any:
        if self._refused is not None:
            raise self._refused
        if self._session is None:
            session = self._token().open()
            try:
                rv = self._login(session)
            except BaseException:
                session.close()
                raise
            if rv not in (CKR_OK, CKR_USER_ALREADY_LOGGED_IN):  # already: another pair of this process logged in
                session.close()
                name = PIN_REFUSALS.get(rv)
                if name is None:
                    raise KeyServiceError(f"pkcs11: login to token {self.token_name} failed (CKR 0x{rv:x})")
                step = (
                    "the token locked the user PIN: have its security officer unlock or reset it, then"
                    if rv == CKR_PIN_LOCKED
                    else "put the right PIN in pkcs11.pin.file (or $KTS_PKCS11_PIN), then"
                )
                self._refused = KeyServiceLoginError(
                    f"pkcs11: token {self.token_name} refused the user PIN ({name}); no login is tried again, so "
                    f"the token does not lock it: {step} configure the plugin again (restart the broker)"
                )
                raise self._refused
            self._session = session
        return self._session

    def _close_session(self) -> None:
        """Close the session after a failure (opened without a PIN, so closing it logs nobody out)."""
        session, self._session = self._session, None
        if session is not None:
            try:
                session.close()
            except self._pkcs11.exceptions.PKCS11Error as e:
                log.debug("pkcs11: closing a failed session of token %s: %s", self.token_name, e)

    def _fail(self, action: str, e: Exception) -> KeyServiceError:
        px = self._pkcs11.exceptions
        self._close_session()  # a new one is opened on the next call
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
