"""Certificates for the TLS tests, made with the openssl command (tests/collector/test_tls.py,
tests/agents/test_shard_trust.py), and a client that fetches over TLS."""

from __future__ import annotations

import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d: Path) -> Path:
    """In ``d``: ca.pem (a test CA), server.pem/server.key (127.0.0.1, signed by it), client.pem/client.key
    (signed by it), rogue.pem/rogue.key (self-signed: no CA the servers know)."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=ocms test CA", cwd=d)
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", "-extfile", "san.cnf", cwd=d)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "rogue.key", "-out", "rogue.pem", "-days",
            "2", "-subj", "/CN=rogue", "-addext", "subjectAltName=IP:127.0.0.1", cwd=d)
    return d


def client(pki: Path, cert: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert:
        context.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"))
    return context


def fetch(url: str, context: ssl.SSLContext | None, data: bytes | None = None, headers=None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()




def wait_answer(url: str, context: ssl.SSLContext, running, headers=None, timeout: float = 90.0) -> bytes:
    """The body of the first 200 ``url`` answers over TLS (polled; ``running()`` asserts the server lives)."""
    from tests.support.waiting import poll_until

    def once():
        running()
        return fetch(url, context, headers=headers)

    return poll_until(once, timeout, f"{url} to answer 200 over TLS", until=lambda got: got[0] == 200,
                      tolerate=(urllib.error.URLError, OSError), interval=0.3)[1]
