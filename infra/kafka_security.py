"""How every Kafka client of a process authenticates to the brokers and encrypts (issue 37): SASL and TLS.

Production clusters want SASL (a user and password: PLAIN or SCRAM) and TLS. ``--kafka-config-file FILE``
(the worker's, the collector's; ``OCMS_KAFKA_CONFIG_FILE``) is a JSON object, checked once at start::

    {"security_protocol": "SASL_SSL",            # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
     "sasl_mechanism": "SCRAM-SHA-512",          # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 (SASL_*)
     "sasl_username": "ocms-worker",
     "sasl_password_file": "/run/secrets/kafka-password",   # the password itself never sits in this file
     "ssl_cafile": "/etc/ocms/kafka-ca.pem",     # the brokers' authority (SSL, SASL_SSL; else the system's)
     "ssl_certfile": "...", "ssl_keyfile": "..."}  # a client certificate (optional, both or neither)

:func:`use` makes it the process's: producer.kafka's builders (every producer, consumer and admin client:
the collector's outlet, exactly-once log, the worker's view reader, discovery) add :func:`client_options`,
and the worker's Faust app gets :meth:`KafkaSecurity.faust_credentials`.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from pathlib import Path

from cms_core.errors import InvalidParameterError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
FIELDS = ("security_protocol", "sasl_mechanism", "sasl_username", "sasl_password_file", "ssl_cafile", "ssl_certfile",
          "ssl_keyfile")


@dataclass(frozen=True)
class KafkaSecurity:
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_cafile)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def client_options(self) -> dict:
        """aiokafka keywords (producer, consumer, admin client)."""
        options: dict = {"security_protocol": self.security_protocol}
        if self.tls:
            options["ssl_context"] = self.ssl_context()
        if self.sasl:
            options.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                           sasl_plain_password=self.sasl_password)
        return options

    def faust_credentials(self):
        """Faust's ``broker_credentials`` (None for PLAINTEXT)."""
        from faust.auth import SASLCredentials, SSLCredentials

        if self.sasl:
            return SASLCredentials(username=self.sasl_username, password=self.sasl_password,
                                   ssl_context=self.ssl_context(), mechanism=self.sasl_mechanism)
        if self.tls:
            return SSLCredentials(self.ssl_context())
        return None


def load(path: str, label: str) -> KafkaSecurity:
    """The settings of ``path``, checked: an error names ``label``, the file and the field."""

    def bad(why: str) -> InvalidParameterError:
        return InvalidParameterError(label, path, why)

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise bad(f"cannot be read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise bad(f"expected a JSON object with {', '.join(FIELDS)}")
    unknown = sorted(set(doc) - set(FIELDS))
    if unknown:
        raise bad(f"unknown field(s) {unknown}; known: {', '.join(FIELDS)}")
    if any(value is not None and not isinstance(value, str) for value in doc.values()):
        raise bad("every field is a string")
    protocol = doc.get("security_protocol", "PLAINTEXT")
    if protocol not in PROTOCOLS:
        raise bad(f"security_protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    password = None
    if protocol.startswith("SASL_"):
        if doc.get("sasl_mechanism") not in MECHANISMS:
            raise bad(f"sasl_mechanism {doc.get('sasl_mechanism')!r}: expected one of {', '.join(MECHANISMS)}")
        if not doc.get("sasl_username") or not doc.get("sasl_password_file"):
            raise bad(f"{protocol} needs sasl_username and sasl_password_file")
        try:
            password = Path(doc["sasl_password_file"]).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise bad(f"sasl_password_file {doc['sasl_password_file']!r} cannot be read: {exc}") from None
        if not password:
            raise bad(f"sasl_password_file {doc['sasl_password_file']!r} is empty")
    elif any(doc.get(name) for name in ("sasl_mechanism", "sasl_username", "sasl_password_file")):
        raise bad(f"sasl_* fields apply to SASL_PLAINTEXT and SASL_SSL, not {protocol}")
    if bool(doc.get("ssl_certfile")) != bool(doc.get("ssl_keyfile")):
        raise bad("ssl_certfile and ssl_keyfile go together")
    if protocol not in ("SSL", "SASL_SSL") and any(doc.get(n) for n in ("ssl_cafile", "ssl_certfile", "ssl_keyfile")):
        raise bad(f"ssl_* fields apply to SSL and SASL_SSL, not {protocol}")
    security = KafkaSecurity(protocol, doc.get("sasl_mechanism"), doc.get("sasl_username"), password,
                             doc.get("ssl_cafile"), doc.get("ssl_certfile"), doc.get("ssl_keyfile"))
    try:
        security.ssl_context()
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise bad(f"its ssl_* files do not load: {exc}") from None
    return security


def config_file(raw, label: str) -> str:
    """A flag's parser (registry.flags.Setting): the path of a Kafka client settings file that loads."""
    load(str(raw), label)
    return str(raw)


_ACTIVE: KafkaSecurity | None = None


def use(path: str | None, label: str = "--kafka-config-file") -> KafkaSecurity | None:
    """Make ``path``'s settings (None: plaintext, no SASL) those of every Kafka client this process builds."""
    global _ACTIVE
    _ACTIVE = load(path, label) if path else None
    return _ACTIVE


def active() -> KafkaSecurity | None:
    return _ACTIVE


def client_options() -> dict:
    """What :func:`use` asks of every aiokafka client ({} without settings: the clients' defaults)."""
    return _ACTIVE.client_options() if _ACTIVE is not None else {}
