"""Kafka admin clients, one per connection, credentials read from the Secrets the spec names.

Why clients are tracked per StreamApp: a client holds librdkafka threads that reconnect forever. When a
spec's `kafka.bootstrapServers` (or its credentials) change, the client for the old connection must go,
or it logs a connection error every few hundred milliseconds until the operator restarts (an old
bootstrap address produced ~5,000 errors in 26 minutes). Each app's pass names itself as the owner; a
client no owner uses any more is dropped (librdkafka closes it when the last reference goes).
"""

from __future__ import annotations

import base64
import gc
import json
import threading

from .k8s import Kube
from .kafka import KafkaAdmin, client_config
from .models import StreamAppSpec


class SecretReferenceError(RuntimeError):
    """A Secret or key the spec names does not exist; `field` is the spec path that names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{message} (referenced by spec.{field})")
        self.field = field


class KafkaAdmins:
    """Callable as `admins(spec, namespace, owner=...)`; thread-safe (kopf runs handlers in threads)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.clients: dict[str, KafkaAdmin] = {}
        self.owners: dict[str, str] = {}
        """owner (namespace/name) -> the client key it used last."""
        self._lock = threading.Lock()

    def _secret(self, namespace: str, field: str, name: str, key: str) -> str:
        secret = self.kube.get("v1", "Secret", namespace, name)
        if secret is None:
            raise SecretReferenceError(field, f"secret {namespace}/{name} does not exist")
        data = secret.get("data") or {}
        if key not in data:
            keys = ", ".join(sorted(data)) or "none"
            raise SecretReferenceError(
                field, f"secret {namespace}/{name} has no key {key!r} (it has: {keys})"
            )
        return base64.b64decode(data[key]).decode()

    def credentials(self, spec: StreamAppSpec, namespace: str) -> dict[str, str]:
        """librdkafka settings from the referenced Secrets; SecretReferenceError names a missing one."""
        k = spec.kafka
        secrets: dict[str, str] = {}
        if k.sasl is not None:
            secrets["sasl.mechanism"] = k.sasl.mechanism
            for key, field, ref in (
                ("sasl.username", "kafka.sasl.usernameSecretRef", k.sasl.username_secret_ref),
                ("sasl.password", "kafka.sasl.passwordSecretRef", k.sasl.password_secret_ref),
            ):
                secrets[key] = self._secret(namespace, field, ref.name, ref.key)
        if k.tls is not None:
            for key, field, tls_ref in (
                ("ssl.ca.location", "kafka.tls.caSecretRef", k.tls.ca_secret_ref),
                ("ssl.certificate.location", "kafka.tls.certificateSecretRef", k.tls.certificate_secret_ref),
                ("ssl.key.location", "kafka.tls.keySecretRef", k.tls.key_secret_ref),
            ):
                if tls_ref is not None:
                    secrets[key] = self._secret(namespace, field, tls_ref.name, tls_ref.key)
        return secrets

    def __call__(self, spec: StreamAppSpec, namespace: str, owner: str | None = None) -> KafkaAdmin:
        k = spec.kafka
        secrets = self.credentials(spec, namespace)
        key = json.dumps([k.bootstrap_servers, k.security_protocol, secrets], sort_keys=True)
        with self._lock:
            if owner is not None:
                previous = self.owners.get(owner)
                self.owners[owner] = key
                if previous is not None and previous != key and previous not in self.owners.values():
                    self.clients.pop(previous, None)
            if key not in self.clients:
                self.clients[key] = KafkaAdmin(
                    client_config(k.bootstrap_servers, k.security_protocol, secrets)
                )
            return self.clients[key]

    def release(self, owner: str) -> None:
        """The app is gone: drop its client unless another app shares the connection."""
        with self._lock:
            key = self.owners.pop(owner, None)
            if key is not None and key not in self.owners.values():
                self.clients.pop(key, None)

    def close(self) -> None:
        """Drop every client now (operator shutdown), not during interpreter finalization: librdkafka
        handles destroyed while Python tears down its threads can crash the process."""
        with self._lock:
            self.clients.clear()
            self.owners.clear()
        gc.collect()
