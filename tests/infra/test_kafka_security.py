"""SASL and TLS for every Kafka client (infra.kafka_security; issue 37): --kafka-config-file is checked
once, naming the flag, the file and the field; once in use, every builder of producer.kafka (producer,
consumer, admin client) and the worker's Faust app get the same settings; without it nothing changes."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from cms_core.errors import InvalidParameterError
from infra import kafka_security
from infra.kafka import consumer_config, make_admin, producer_config


@pytest.fixture(autouse=True)
def plaintext_after():
    yield
    kafka_security.use(None)


def config(tmp_path, **doc) -> str:
    path = tmp_path / "kafka.json"
    path.write_text(json.dumps(doc))
    return str(path)


def password(tmp_path, text: str = "s3cret\n") -> str:
    path = tmp_path / "password"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("doc, why", [
    ({"security_protocol": "SASL"}, "security_protocol 'SASL'"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "sasl_mechanism 'GSSAPI'"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}, "needs sasl_username and sasl_password_file"),
    ({"security_protocol": "PLAINTEXT", "sasl_username": "u"}, "sasl_\\* fields apply to SASL"),
    ({"security_protocol": "PLAINTEXT", "ssl_cafile": "x"}, "ssl_\\* fields apply to SSL"),
    ({"security_protocol": "SSL", "ssl_certfile": "c.pem"}, "go together"),
    ({"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"}, "do not load"),
    ({"bootstrap": "x"}, "unknown field"),
    ({"security_protocol": 3}, "every field is a string"),
])
def test_a_bad_kafka_config_file_is_refused_naming_the_flag_and_the_field(tmp_path, doc, why):
    with pytest.raises(InvalidParameterError, match=f"--kafka-config-file.*{why}"):
        kafka_security.config_file(config(tmp_path, **doc), "--kafka-config-file")


def test_the_password_comes_from_its_own_file_and_must_be_there(tmp_path):
    doc = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", sasl_username="ocms")
    with pytest.raises(InvalidParameterError, match="cannot be read"):
        kafka_security.load(config(tmp_path, **doc, sasl_password_file=str(tmp_path / "none")), "--kafka-config-file")
    with pytest.raises(InvalidParameterError, match="is empty"):
        kafka_security.load(config(tmp_path, **doc, sasl_password_file=password(tmp_path, "\n")), "x")
    security = kafka_security.load(config(tmp_path, **doc, sasl_password_file=password(tmp_path)), "x")
    assert security.sasl_password == "s3cret" and "s3cret" not in repr(kafka_security.FIELDS)


def test_every_kafka_client_gets_the_settings_in_use_and_none_without(tmp_path):
    assert "security_protocol" not in producer_config("k:9092") and "security_protocol" not in consumer_config("k:9092")
    path = config(tmp_path, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_username="ocms",
                  sasl_password_file=password(tmp_path))
    kafka_security.use(path)
    want = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "ocms",
            "sasl_plain_password": "s3cret"}
    for got in (producer_config("k:9092"), consumer_config("k:9092", group_id="g")):
        assert {k: got[k] for k in want} == want
    async def admin_client():
        return make_admin("k:9092")._client

    client = asyncio.run(admin_client())
    assert (client._security_protocol, client._sasl_plain_username) == ("SASL_PLAINTEXT", "ocms")
    kafka_security.use(None)
    assert "security_protocol" not in producer_config("k:9092")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
@pytest.mark.integration
def test_tls_to_kafka_takes_the_brokers_authority_and_the_worker_s_faust_app_gets_it(tmp_path):
    from agents.app import faust_settings
    from agents.settings import WorkerSettings
    from tests.support.tls import make_pki

    pki = make_pki(tmp_path)
    path = config(tmp_path, security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="ocms",
                  sasl_password_file=password(tmp_path), ssl_cafile=str(pki / "ca.pem"),
                  ssl_certfile=str(pki / "client.pem"), ssl_keyfile=str(pki / "client.key"))
    kafka_security.use(path)
    options = producer_config("k:9092")
    assert options["security_protocol"] == "SASL_SSL" and options["ssl_context"].verify_mode.name == "CERT_REQUIRED"
    settings = WorkerSettings.build(bootstrap_servers="k:9092", kafka_config_file=path)
    credentials = faust_settings(settings)["broker_credentials"]
    assert (credentials.username, credentials.mechanism.value, credentials.protocol.value) == (
        "ocms", "PLAIN", "SASL_SSL")
    assert "broker_credentials" not in faust_settings(WorkerSettings.build(bootstrap_servers="k:9092"))
