"""A trivial upstream for measure.sh: answers every GET 200 and every POST 201 with {"ok":true}.
Usage: python3 up.py PORT"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def _ok(self, code):
        n = int(self.headers.get("Content-Length") or 0)
        if n: self.rfile.read(n)
        b = b'{"ok":true}'
        self.send_response(code); self.send_header("Content-Type", "application/json"); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self): self._ok(200)
    def do_POST(self): self._ok(201)
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
