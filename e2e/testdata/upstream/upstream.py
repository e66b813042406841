"""A small upstream API for idem proxy's end-to-end tests, in Python's
standard library only: widgets, orders and notes, its OpenAPI 3.1 document
at /openapi.json, and what it saw at /_stats (not in the document).

Usage: python3 upstream.py [PORT]   (0 or nothing: any free port; it prints
"listening on http://127.0.0.1:PORT" once it accepts connections)
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"widgets": [], "effects": {}, "keys": [], "reads": 0, "auth": [], "paths": []}

OPENAPI = {
    "openapi": "3.1.0",
    "info": {"title": "widgets", "version": "1"},
    "paths": {
        "/widgets": {
            "get": {"operationId": "listWidgets", "summary": "List the widgets.",
                    "responses": {"200": {"description": "the widgets"}}},
            "post": {
                "operationId": "createWidget", "summary": "Create a widget.",
                "x-idem-agent-retry": {"kind": "same_key_replay", "reconcile": "listWidgets",
                                       "rationale": "Creates a widget; the key replays the original answer."},
                "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewWidget"}}}},
                "responses": {"201": {"description": "created",
                                      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Widget"}}}}},
            },
        },
        "/widgets/{widgetId}": {
            "get": {"operationId": "getWidget", "summary": "Show one widget.",
                    "parameters": [{"name": "widgetId", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "the widget"}}},
        },
        "/orders": {
            "post": {"operationId": "createOrder", "summary": "Place an order.",
                     "requestBody": {"required": True, "content": {"application/json": {"schema": {
                         "type": "object", "properties": {"item": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
                         "required": ["item"], "additionalProperties": False}}}},
                     "responses": {"201": {"description": "placed"}}},
        },
        "/payouts": {
            "post": {"operationId": "createPayout", "summary": "Pay money out.",
                     "requestBody": {"required": True, "content": {"application/json": {"schema": {
                         "type": "object", "properties": {"amount": {"type": "integer", "minimum": 1}}, "required": ["amount"]}}}},
                     "responses": {"201": {"description": "paid"}}},
        },
        "/notes": {
            "post": {"operationId": "createNote", "summary": "Leave a note.",
                     "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}}}}},
                     "responses": {"201": {"description": "noted"}}},
        },
    },
    "components": {"schemas": {
        "NewWidget": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1},
                                                       "delayMs": {"type": "integer", "minimum": 0}},
                      "required": ["name"], "additionalProperties": False},
        "Widget": {"type": "object", "properties": {"id": {"type": "string"}, "name": {"type": "string"}}},
    }},
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def effect(self, kind):
        key = self.headers.get("Idempotency-Key") or ""
        with LOCK:
            STATE["effects"][key] = STATE["effects"].get(key, 0) + 1
            STATE["keys"].append({"kind": kind, "key": key})
            STATE["auth"].append(self.headers.get("Authorization") or "")

    def do_GET(self):
        if self.path == "/openapi.json":
            return self.answer(200, OPENAPI)
        if self.path == "/_stats":
            with LOCK:
                return self.answer(200, STATE)
        if self.path.startswith("/widgets"):
            with LOCK:
                STATE["reads"] += 1
                STATE["paths"].append(self.path)
                widgets = list(STATE["widgets"])
            if self.path == "/widgets":
                return self.answer(200, {"widgets": widgets})
            wid = self.path.rsplit("/", 1)[1]
            for w in widgets:
                if w["id"] == wid:
                    return self.answer(200, w)
            return self.answer(404, {"error": "no such widget"})
        self.answer(404, {"error": "no route"})

    def do_POST(self):
        body = self.body()
        if self.path == "/widgets":
            self.effect("widget")
            time.sleep(body.get("delayMs", 0) / 1000)
            if body.get("name") == "explode":
                return self.answer(500, {"error": "exploded after writing"})
            with LOCK:
                w = {"id": "w%d" % (len(STATE["widgets"]) + 1), "name": body.get("name")}
                STATE["widgets"].append(w)
            return self.answer(201, w, [("Location", "/widgets/" + w["id"]), ("X-Upstream", "python")])
        if self.path == "/orders":
            self.effect("order")
            return self.answer(201, {"item": body.get("item"), "quantity": body.get("quantity", 1)})
        if self.path == "/payouts":
            self.effect("payout")
            time.sleep(body.get("delayMs", 0) / 1000)
            return self.answer(201, {"amount": body.get("amount")})
        if self.path == "/notes":
            self.effect("note")
            return self.answer(201, {"text": body.get("text")})
        self.answer(404, {"error": "no route"})


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print("listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
