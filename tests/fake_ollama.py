"""A protocol-faithful Ollama server on 127.0.0.1 for the tests, with scripted texts.

It speaks what the official ``ollama`` client uses: ``GET /api/version``, ``GET /api/tags``,
``POST /api/show`` (404 for a model it does not have) and ``POST /api/chat``, streamed as
NDJSON over chunked HTTP/1.1 like the real server, or one JSON object with
``"stream": false``. Replies are deterministic functions of (model, last message, seed), a
few words per streamed piece; ``server.words`` scripts their lengths.

Failures are scripted per chat call through ``server.failures`` (consumed in order):
``"error"`` (an ``{"error": ...}`` line after two pieces), ``"drop"`` (the connection closed
mid-stream), ``"stall"`` (silence for ``stall_seconds``), ``"half_json"`` (a truncated JSON
line) and ``"no_done"`` (the stream ends without ``done: true``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WORDS = (
    "cells antibodies fever lymph nodes memory vaccine virus bacteria signal defence "
    "response barrier skin mucus inflammation white blood marrow thymus spleen protein "
    "receptor pathogen immunity adaptive innate tissue repair infection clearance"
).split()


def scripted_text(model: str, prompt: str, seed: int, n_words: int = 24) -> str:
    """The reply the server gives: words chosen by a hash of the inputs; a model named
    ``judge:...`` gives three scores 1-7 in the form the judge is asked for."""
    h = hashlib.sha256(f"{model}|{prompt}|{seed}".encode()).digest()
    if model.startswith("judge"):
        return (f"Relevance: {1 + h[0] % 7}\nCoherence: {1 + h[1] % 7}\n"
                f"Helpfulness: {1 + h[2] % 7}")
    words = [WORDS[b % len(WORDS)] for b in (h * 4)[:n_words]]
    ask = "?" if "teacher" in model else "."
    return f"{model.split(':')[0]} says " + " ".join(words) + ask


class _Server(ThreadingHTTPServer):
    """The HTTP server, quiet when a client hangs up: the tests cancel and time out requests
    on purpose, and a reset connection is not the server's error to print."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeOllama:
    """Start with ``with FakeOllama(models=[...]) as server: server.host``."""

    def __init__(self, models: tuple[str, ...] = ("student:1b", "teacher:1b", "judge:1b"),
                 stall_seconds: float = 3.0) -> None:
        self.models = tuple(models)
        self.stall_seconds = stall_seconds
        self.failures: list[str] = []
        #: Words per reply, ``(model, seed, last message) -> n`` (at most 128); None: 24.
        self.words: Any = None
        self.requests: list[dict[str, Any]] = []
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        """The server's address, for the client's ``host``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FakeOllama:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, code: int, obj: Any) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_GET(self) -> None:
                if self.path == "/api/version":
                    self._json(200, {"version": "0.0.0-test"})
                elif self.path == "/api/tags":
                    self._json(200, {"models": [
                        {"name": m, "model": m, "modified_at": "2026-01-01T00:00:00Z",
                         "size": 1, "digest": "0" * 64, "details": {}}
                        for m in server.models]})
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                server.requests.append({"path": self.path, **req})
                model = req.get("model", "")
                if self.path == "/api/show":
                    if model not in server.models:
                        self._json(404, {"error": f"model '{model}' not found"})
                    else:
                        self._json(200, {"modelfile": "", "parameters": "", "template": "",
                                         "details": {"family": "test", "format": "gguf"},
                                         "model_info": {"general.architecture": "test"},
                                         "capabilities": ["completion"],
                                         "modified_at": "2026-01-01T00:00:00Z"})
                    return
                if self.path != "/api/chat":
                    self._json(404, {"error": "not found"})
                    return
                if model not in server.models:
                    self._json(404, {"error": f"model '{model}' not found, try pulling it first"})
                    return
                messages = req.get("messages", [])
                seed = int((req.get("options") or {}).get("seed", 0))
                last = messages[-1]["content"] if messages else ""
                n_words = 24 if server.words is None else int(server.words(model, seed, last))
                text = scripted_text(model, last, seed, n_words)
                if not req.get("stream", True):
                    self._json(200, self._part(model, text, True))
                    return
                failure = server.failures.pop(0) if server.failures else None
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                words = text.split(" ")
                pieces = [w + " " for w in words[:-1]] + [words[-1]]
                for k, piece in enumerate(pieces):
                    if k == 2 and failure == "error":
                        self._chunk(json.dumps({"error": "model runner crashed"}).encode()
                                    + b"\n")
                        self._chunk(b"")
                        return
                    if k == 2 and failure == "drop":
                        self.wfile.flush()
                        self.connection.shutdown(2)  # no final chunk: a torn stream
                        self.close_connection = True
                        return
                    if k == 2 and failure == "stall":
                        time.sleep(server.stall_seconds)
                        self.close_connection = True
                        return
                    if k == 2 and failure == "half_json":
                        self._chunk(b'{"model": "' + model.encode() + b'", "mess\n')
                        self._chunk(b"")
                        return
                    self._chunk(json.dumps(self._part(model, piece, False)).encode() + b"\n")
                if failure != "no_done":
                    self._chunk(json.dumps(self._part(model, "", True)).encode() + b"\n")
                self._chunk(b"")

            @staticmethod
            def _part(model: str, content: str, done: bool) -> dict[str, Any]:
                part: dict[str, Any] = {
                    "model": model, "created_at": "2026-01-01T00:00:00Z",
                    "message": {"role": "assistant", "content": content}, "done": done}
                if done:
                    part.update(done_reason="stop", total_duration=1, eval_count=1)
                return part

        return Handler
