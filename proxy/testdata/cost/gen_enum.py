"""Writes an OpenAPI 3.1 document with one POST operation whose body's
"code" property is an enum of N strings (argv[1], default 1,300,000)."""
import json, sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1300000
out = sys.argv[2] if len(sys.argv) > 2 else "enum.json"
doc = {"openapi": "3.1.0", "info": {"title": "enum", "version": "1"},
       "paths": {"/things": {"post": {"operationId": "createThing",
           "x-idem-agent-retry": {"kind": "same_key_replay", "reconcile": "listThings", "rationale": "replays"},
           "requestBody": {"required": True, "content": {"application/json": {"schema": {
               "type": "object", "properties": {"code": {"$ref": "#/components/schemas/Code"}, "name": {"type": "string"}},
               "required": ["code"]}}}},
           "responses": {"201": {"description": "created"}}},
         "get": {"operationId": "listThings", "responses": {"200": {"description": "the things"}}}}},
       "components": {"schemas": {"Code": {"type": "string", "enum": ["c%07d" % i for i in range(n)]}}}}
with open(out, "w") as f:
    json.dump(doc, f, separators=(",", ":"))
