"""Writes an OpenAPI 3.1 document with N operations (argv[1], default
10,000): N/2 paths, each with a GET (path parameter, query parameter, an
answer schema) and a POST (a JSON object body referring to a shared
component, an answer schema)."""
import json, sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
out = sys.argv[2] if len(sys.argv) > 2 else "ops.json"
paths = {}
for i in range(n // 2):
    paths["/r%d/{id}" % i] = {
        "get": {"operationId": "get%d" % i, "summary": "Read resource %d." % i,
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                               {"name": "verbose", "in": "query", "schema": {"type": "boolean"}}],
                "responses": {"200": {"description": "it", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}}}},
        "post": {"operationId": "post%d" % i, "summary": "Change resource %d." % i,
                 "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                 "requestBody": {"required": True, "content": {"application/json": {"schema": {
                     "type": "object", "properties": {"thing": {"$ref": "#/components/schemas/Thing"},
                                                      "note": {"type": "string", "maxLength": 200}},
                     "required": ["thing"]}}}},
                 "responses": {"201": {"description": "done", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}}}},
    }
doc = {"openapi": "3.1.0", "info": {"title": "many", "version": "1"}, "paths": paths,
       "components": {"schemas": {
           "Thing": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1}, "size": {"type": "integer", "minimum": 0},
                                                      "tags": {"type": "array", "items": {"type": "string"}}, "owner": {"$ref": "#/components/schemas/Owner"}},
                     "required": ["name"]},
           "Owner": {"type": "object", "properties": {"id": {"type": "string"}, "email": {"type": "string", "format": "email"}}}}}}
with open(out, "w") as f:
    json.dump(doc, f, separators=(",", ":"))
