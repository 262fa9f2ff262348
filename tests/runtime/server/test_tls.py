"""`serve --ssl-certfile/--ssl-keyfile` (and `--ssl-ca-certs` for client certificates): a real
server process over HTTPS with certificates made here (a CA, a server certificate for
127.0.0.1, a client certificate), answering as the library does; plain HTTP, an untrusted
client and (with --ssl-ca-certs) a client without a certificate get no answer; bad TLS flags
are one line and exit 2 before anything listens."""
from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
import threading
import time

import httpx
import pytest

from bertonnx.runtime.cli.main import main
from bertonnx.runtime.server.process import announced_url

from tests.live_server import GUARD_S, serve_argv
from tests.runtime.server._helpers import jsonable

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

TEXT = "the cat sat on the mat"


def _issue(folder, name: str, issuer=None, *, ca: bool = False, server: bool = False):
    """(cert path, key path) of a new EC certificate `name`, signed by `issuer` (its
    (cert, key) objects) or by itself; returns the objects too, to sign others."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer[0].subject if issuer else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    if not ca:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path, (cert, key)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    ca_cert, _, ca = _issue(folder, "test-ca", ca=True)
    server = _issue(folder, "server", ca, server=True)[:2]
    client = _issue(folder, "client", ca)[:2]
    stranger = _issue(folder, "stranger")[:2]   # self-signed: no CA the server trusts
    encrypted = folder / "encrypted.key"          # the server's key under a passphrase
    encrypted.write_bytes(serialization.load_pem_private_key(
        server[1].read_bytes(), None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase")))
    return {"ca": ca_cert, "server": server, "client": client, "stranger": stranger,
            "encrypted": encrypted}


def _context(pki, cert=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    if cert is not None:
        context.load_cert_chain(*map(str, cert))
    return context


class TlsServer:
    """`bertonnx serve ... --ssl-*` in a subprocess: its announced https URL, stopped by its
    own PID."""

    def __init__(self, export, context: ssl.SSLContext, *flags):
        self.proc = subprocess.Popen(serve_argv(export, *flags), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        announced = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line)
                if announced_url(line):
                    announced.set()
            announced.set()   # the process ended

        threading.Thread(target=read, daemon=True).start()
        try:
            assert announced.wait(GUARD_S), "no announcement"
            url = next((announced_url(x) for x in self.lines if announced_url(x)), None)
            assert url is not None, f"exit {self.proc.poll()}:\n{''.join(self.lines)}"
            self.url = url
            self.client = httpx.Client(base_url=url, verify=context, timeout=GUARD_S)
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, "".join(self.lines)
            try:
                if self.client.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "never healthy:\n" + "".join(self.lines)
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(GUARD_S)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if hasattr(self, "client"):
            self.client.close()
        self.stop()


def test_https_answers_as_the_library_and_plain_http_does_not(tiny_export, ours, pki):
    export = tiny_export("text-classification")
    cert, key = pki["server"]
    with TlsServer(export, _context(pki), "--ssl-certfile", cert, "--ssl-keyfile",
                   key) as server:
        assert server.url.startswith("https://127.0.0.1:")
        r = server.client.post("/predict", json={"inputs": TEXT})
        assert r.status_code == 200
        assert r.json() == jsonable(ours("text-classification")(TEXT))
        plain = server.url.replace("https://", "http://")
        with pytest.raises(httpx.TransportError):   # no HTTP answer on the TLS port
            httpx.get(plain + "/health", timeout=GUARD_S)
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(server.url + "/health", timeout=GUARD_S)   # the system's CAs only


def test_client_certificates_with_ssl_ca_certs(tiny_export, pki):
    cert, key = pki["server"]
    with TlsServer(tiny_export("text-classification"), _context(pki, pki["client"]),
                   "--ssl-certfile", cert, "--ssl-keyfile", key,
                   "--ssl-ca-certs", pki["ca"]) as server:
        assert server.client.post("/predict", json={"inputs": TEXT}).status_code == 200
        for context in (_context(pki), _context(pki, pki["stranger"])):
            # TLS 1.3 refuses the missing or unknown certificate after the handshake, at the
            # client's first read: a transport error either way, never an HTTP answer
            with pytest.raises(httpx.TransportError):
                httpx.get(server.url + "/health", verify=context, timeout=GUARD_S)


@pytest.mark.parametrize("flags, message", [
    (["--ssl-certfile", "{cert}"], "--ssl-certfile needs --ssl-keyfile"),
    (["--ssl-keyfile", "{key}"], "--ssl-keyfile needs --ssl-certfile"),
    (["--ssl-ca-certs", "{ca}"], "--ssl-ca-certs (client certificates) needs TLS"),
    (["--ssl-certfile", "{cert}", "--ssl-keyfile", "{other_key}"], "cannot use --ssl-certfile"),
    (["--ssl-certfile", "{cert}", "--ssl-keyfile", "{garbage}"], "cannot use --ssl-certfile"),
    (["--ssl-certfile", "{cert}", "--ssl-keyfile", "{encrypted}"],   # and no prompt for it
     "an encrypted key is not supported"),
    (["--ssl-certfile", "{cert}", "--ssl-keyfile", "{key}", "--ssl-ca-certs", "{garbage}"],
     "cannot read --ssl-ca-certs"),
    (["--ssl-certfile", "{cert}", "--ssl-keyfile", "{missing}"], "does not exist"),
    (["--ray", "auto", "--ssl-certfile", "{cert}", "--ssl-keyfile", "{key}"],
     "--ssl-certfile does not apply with --ray"),
    (["--engine", "triton", "--ssl-certfile", "{cert}"],
     "--ssl-certfile does not apply with --engine triton: put a TLS-terminating proxy"),
])
def test_bad_tls_flags_are_one_line_and_exit_2(tiny_export, pki, tmp_path, capsys, monkeypatch,
                                               flags, message):
    def listen(*args):   # a flag wrongly accepted fails the test instead of serving for ever
        raise AssertionError("the server would listen")

    monkeypatch.setattr("bertonnx.runtime.server.process.bind", listen)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a PEM file\n")
    paths = {"cert": pki["server"][0], "key": pki["server"][1], "ca": pki["ca"],
             "other_key": pki["client"][1], "garbage": garbage, "encrypted": pki["encrypted"],
             "missing": tmp_path / "missing.key"}
    argv = [f.format(**paths) for f in flags]
    assert main(["serve", str(tiny_export("text-classification")), "--port", "0", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
