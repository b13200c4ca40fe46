"""TLS on the collector and the worker (issue 37), driven from outside with a certificate authority and
certificates the test makes (openssl): HTTPS answers with the server verified; plain HTTP to the TLS port
gets nothing; with --tls-client-ca a client without a certificate that authority signed is refused in the
handshake, one with it is answered; bad files are refused at start, naming the flag."""

from __future__ import annotations

import json
import shutil
import ssl
import urllib.error
from pathlib import Path

import pytest

from agents.settings import WorkerSettings
from cms_core.errors import InvalidParameterError
from collector.settings import CollectorSettings
from tests.agents.harness import WorkerProcess

from tests.support.tls import client, fetch, make_pki, wait_answer

from .harness import WIRE, CollectorProcess, single_messages

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


def refused(url: str, context: ssl.SSLContext | None) -> bool:
    """True when the request gets no HTTP answer (a refused handshake, a connection closed)."""
    try:
        fetch(url, context)
    except (urllib.error.URLError, ssl.SSLError, ConnectionError, OSError):
        return True
    return False


@pytest.mark.integration
class TlsCollector(CollectorProcess):
    """A collector serving HTTPS: healthy once /healthz answers over TLS with ``context``."""

    context: ssl.SSLContext | None = None

    def wait_healthy(self, timeout: float = 30.0) -> dict:
        from tests.support.waiting import poll_until

        def health():
            assert self.alive(), self.log_path.read_text()[-2000:]
            return fetch(f"https://127.0.0.1:{self.port}/healthz", self.context)

        return poll_until(health, timeout, "the collector to answer /healthz over TLS", until=lambda got: got[0] == 200,
                          tolerate=(OSError,))[1]


@pytest.mark.integration
def test_tls_files_are_checked_once_at_start_naming_the_flag(pki, registry_path, tmp_path):
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    base = dict(registry=str(registry_path), bootstrap_servers="k:9092")
    with pytest.raises(InvalidParameterError, match="--tls-cert.*junk.pem.*does not load"):
        CollectorSettings.build({}, **base, tls_cert=str(tmp_path / "junk.pem"), tls_key=str(pki / "server.key"))
    with pytest.raises(InvalidParameterError, match="--tls-key.*go together"):
        WorkerSettings.build(broker="embedded", tls_cert=str(pki / "server.pem"))
    with pytest.raises(InvalidParameterError, match="--tls-client-ca.*applies to TLS"):
        WorkerSettings.build(broker="embedded", tls_client_ca=str(pki / "ca.pem"))
    with pytest.raises(InvalidParameterError, match="--tls-cert.*does not load"):  # a key of another certificate
        WorkerSettings.build(broker="embedded", tls_cert=str(pki / "server.pem"), tls_key=str(pki / "client.key"))
    ok = WorkerSettings.build(broker="embedded", tls_cert=str(pki / "server.pem"), tls_key=str(pki / "server.key"),
                              tls_client_ca=str(pki / "ca.pem"))
    assert ok.web_scheme == "https"


@pytest.mark.integration
def test_the_collector_takes_uploads_over_tls_and_with_a_client_ca_only_from_certified_clients(
        broker, registry_path, dest, pki, tmp_path):
    tls = ("--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"))
    body = single_messages(dest, 1, seed=3)[0]
    headers = {"Content-Type": WIRE}
    TlsCollector.context = client(pki, "client")
    with TlsCollector(registry_path, broker.bootstrap_servers, "tls-collector", tmp_path, *tls) as c:
        url = f"https://127.0.0.1:{c.port}"
        assert fetch(url + "/v1/reports", client(pki), body, headers)[0] == 202
        assert fetch(url + "/healthz", client(pki))[0] == 200
        status, answer = fetch(url + "/v1/reports", client(pki), b"junk", headers)  # a client fault over TLS: tarpit
        assert status == 400 and json.loads(answer)["reason"], answer  # was a 500: TLS transports take no weakref
        assert refused(f"http://127.0.0.1:{c.port}/healthz", None) or fetch(
            f"http://127.0.0.1:{c.port}/healthz", None)[0] == 400, "plain HTTP on the TLS port gets no answer"
        assert refused(url + "/healthz", ssl.create_default_context()), "a client that does not trust the CA"
    with TlsCollector(registry_path, broker.bootstrap_servers, "tls-collector", tmp_path, *tls,
                      "--tls-client-ca", str(pki / "ca.pem")) as c:
        url = f"https://127.0.0.1:{c.port}"
        assert refused(url + "/healthz", client(pki)), "no client certificate"
        assert refused(url + "/healthz", client(pki, "rogue")), "a certificate of another authority"
        assert fetch(url + "/v1/reports", client(pki, "client"), body, headers)[0] == 202


@pytest.mark.integration
def test_the_worker_serves_its_api_over_tls_with_an_optional_client_ca(broker, registry_path, pki, tmp_path):
    worker = WorkerProcess(broker.bootstrap_servers, "tls-worker", "tls-worker", tmp_path, "--registry",
                           str(registry_path), "--tls-cert", str(pki / "server.pem"), "--tls-key",
                           str(pki / "server.key"), "--tls-client-ca", str(pki / "ca.pem")).start()
    try:
        url = f"https://127.0.0.1:{worker.web_port}"
        wait_answer(url + "/healthz", client(pki, "client"), worker.running)
        status, body = fetch(url + "/estimates", client(pki, "client"))
        assert status == 200 and json.loads(body)["n"] == 0
        assert refused(url + "/healthz", client(pki)), "no client certificate"
        assert refused(url + "/healthz", client(pki, "rogue"))
        assert refused(f"http://127.0.0.1:{worker.web_port}/healthz", None) or fetch(
            f"http://127.0.0.1:{worker.web_port}/healthz", None)[0] == 400
    finally:
        worker.stop()
