#!/usr/bin/env python3
"""A webhook receiver for the system tests that verifies every delivery with
the Standard Webhooks reference library (`standardwebhooks` on PyPI), not
with gpumarket's own code.

It prints its port on the first line of stdout, then serves:
  POST /_secret   {"secret": "whsec_...", "path": "/p"}
                                            the secret deliveries must verify with
                                            (for deliveries to `path` only, when given)
  POST /_fail     {"count": n}              answer the next n deliveries 503
  POST /_hang     {"count": n, "seconds": s} hold the next n deliveries s seconds
                                            before answering (a slow receiver)
  GET  /_received                           every delivery seen, in arrival order:
                                            {"id", "type", "verified", "status", "body"}
  POST <any other path>                     a delivery: 204 when it verifies and
                                            no failure is queued, 503 for a queued
                                            failure, 400 when it does not verify
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

LOCK = threading.Lock()
STATE = {"secret": None, "secrets": {}, "fail": 0, "hang": 0, "hang_seconds": 0, "received": []}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body=b""):
        try:
            self.send_response(status)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The sender gave up or was killed mid-delivery: it sends again.
            pass

    def do_GET(self):
        if self.path == "/_received":
            with LOCK:
                body = json.dumps(STATE["received"]).encode()
            self.reply(200, body)
        else:
            self.reply(404)

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        if self.path == "/_secret":
            asked = json.loads(body)
            with LOCK:
                if asked.get("path"):
                    STATE["secrets"][asked["path"]] = asked["secret"]
                else:
                    STATE["secret"] = asked["secret"]
            return self.reply(204)
        if self.path == "/_hang":
            asked = json.loads(body)
            with LOCK:
                STATE["hang"] = int(asked["count"])
                STATE["hang_seconds"] = float(asked["seconds"])
            return self.reply(204)
        if self.path == "/_fail":
            with LOCK:
                STATE["fail"] = int(json.loads(body)["count"])
            return self.reply(204)
        headers = {k.lower(): v for k, v in self.headers.items()}
        with LOCK:
            secret = STATE["secrets"].get(self.path, STATE["secret"])
        verified = False
        event_type = None
        if secret:
            try:
                payload = Webhook(secret).verify(body, headers)
                verified = True
                event_type = payload.get("type")
            except Exception:  # noqa: BLE001 - any failure is "not verified"
                verified = False
        with LOCK:
            hang = 0
            if STATE["hang"] > 0:
                STATE["hang"] -= 1
                hang = STATE["hang_seconds"]
        if hang:
            time.sleep(hang)
        with LOCK:
            if not verified:
                status = 400
            elif STATE["fail"] > 0:
                STATE["fail"] -= 1
                status = 503
            else:
                status = 204
            STATE["received"].append(
                {
                    "id": headers.get("webhook-id"),
                    "path": self.path,
                    "type": event_type,
                    "verified": verified,
                    "status": status,
                    "body": body.decode("utf-8", "replace"),
                }
            )
        self.reply(status, b"queued failure" if status == 503 else b"")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
