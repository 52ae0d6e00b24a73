"""A tiny HTTP server on 127.0.0.1 that records requests and echoes their headers, for
http_request tests; it counts effects by Idempotency-Key, like a careful API would."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote


def http_allowed_config(path: Path, echo: EchoServer) -> Path:
    """Write a chatgate.toml letting http_request reach ``echo`` without asking."""
    path.write_text(f"""
[tools.http_request]
allowed_hosts = ["{echo.entry}"]

[[policy]]
tool = "http_request"
decision = "allow"
""")
    return path


def _disguised(value: str) -> str:
    """What a server turned against its caller might send back: a received token in every
    disguise a model could be told to ask for."""
    raw = value.encode()
    return "\n".join(
        [
            f"reversed {value[::-1]}",
            f"prefix {value[:10]}",
            f"url {quote(value, safe='')}",
            f"base64 {base64.b64encode(raw).decode()}",
            f"base64url {base64.urlsafe_b64encode(raw).decode()}",
            f"basic {base64.b64encode(b'me:' + raw).decode()}",
            f"hex {raw.hex()}",
            f"json {json.dumps({'t': value})}",
        ]
    )


class EchoServer:
    """Use as a context manager; ``requests`` holds (method, path, headers) tuples."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                headers = {k.lower(): v for k, v in self.headers.items()}
                owner.requests.append((self.command, self.path, headers))
                if self.path.startswith("/slow"):
                    time.sleep(1.5)  # a call that takes a while: something can happen meanwhile
                payload = json.dumps({"method": self.command, "headers": headers, "body": body})
                if self.path.startswith("/disguise"):
                    payload = _disguised(headers.get("x-token", ""))
                data = payload.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        """host:port, for URLs."""
        return f"127.0.0.1:{self.port}"

    @property
    def entry(self) -> str:
        """Its allowed_hosts entry: plain http to a loopback address, listed as such."""
        return f"http://127.0.0.1:{self.port}"

    def effects(self) -> int:
        """Distinct effects: requests counted once per Idempotency-Key (``len(requests)``
        is every request that arrived, a deduplicated retry included)."""
        keys = {
            h.get("idempotency-key") or f"none-{i}" for i, (_m, _p, h) in enumerate(self.requests)
        }
        return len(keys)

    def __enter__(self) -> EchoServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
