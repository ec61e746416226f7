"""What `kts gc` says when it cannot read the cluster, from the errors kafka-python logged while it retried
(rsm.operator_tools.cluster_record._unreadable); no broker here."""

from __future__ import annotations

from kafka.errors import KafkaConnectionError, KafkaTimeoutError

from rsm.operator_tools.cluster_record import _unreadable

SASL = {
    "bootstrap_servers": ["kafka:9093"],
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": "kts",
}


def test_every_connection_closed_under_sasl_names_the_credentials_and_the_protocol() -> None:
    seen = [KafkaConnectionError("socket disconnected")] * 3 + [KafkaTimeoutError("Unable to bootstrap")]
    message = _unreadable(SASL, KafkaTimeoutError("Unable to bootstrap"), seen)
    assert "closed every connection" in message and "authentication failed for user 'kts'" in message
    assert "sasl.jaas.config" in message and "security.protocol SASL_SSL" in message


def test_without_sasl_or_with_other_errors_the_message_stays_general() -> None:
    plain = {"bootstrap_servers": ["kafka:9092"], "security_protocol": "PLAINTEXT"}
    closed = [KafkaConnectionError("socket disconnected")]
    assert "authentication" not in _unreadable(plain, KafkaTimeoutError("t"), closed)
    refused = [KafkaConnectionError("socket disconnected"), ConnectionRefusedError("refused")]
    message = _unreadable(SASL, KafkaTimeoutError("t"), refused)
    assert "authentication" not in message and "last error: refused" in message
