"""A client of the probe's secured endpoints, as a scraper is one: HTTPS against a CA
of the test's own, a client certificate or none, basic auth or none::

    client = EndpointClient(port, ca_file=ca, user="prometheus", password="s3cret")
    client.get("/metrics").status  # 200
    EndpointClient(port).refused()  # plain HTTP on the TLS port: the error it ends in
"""

from __future__ import annotations

import base64
import http.client
import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: str
    # The certificate the server presented (DER), None over plain HTTP.
    server_certificate: bytes | None


@dataclass(frozen=True)
class EndpointClient:
    port: int
    # None: plain HTTP.
    ca_file: Path | None = None
    client_cert: tuple[Path, Path] | None = None
    user: str | None = None
    password: str | None = None

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if self.client_cert is not None:
            context.load_cert_chain(*self.client_cert)
        return context

    def get(self, path: str, timeout: float = 5.0) -> Reply:
        """One request on a new connection (so a new TLS handshake). Raises what the
        connection raises: ssl.SSLError, ConnectionError, http.client.HTTPException."""
        connection: http.client.HTTPConnection
        if self.ca_file is None:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        else:
            connection = http.client.HTTPSConnection(
                "127.0.0.1", self.port, timeout=timeout, context=self.context()
            )
        headers = {}
        if self.user is not None:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            body = response.read().decode()
            sock = connection.sock
            certificate = (
                sock.getpeercert(binary_form=True) if isinstance(sock, ssl.SSLSocket) else None
            )
            return Reply(response.status, dict(response.getheaders()), body, certificate)
        finally:
            connection.close()

    def refused(self, path: str = "/metrics") -> BaseException | None:
        """The error a request ends in; None when it got an HTTP answer."""
        try:
            self.get(path)
        except (ssl.SSLError, ConnectionError, http.client.HTTPException, TimeoutError) as exc:
            return exc
        return None
