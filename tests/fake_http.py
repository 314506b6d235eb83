"""What the fake HTTP endpoints of the tests share: a quiet handler that reads JSON bodies."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and reads the request's JSON body."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_json(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))
