"""A span processor for the rotel OTLP collector (the tracing test's receiver).

rotel receives the spans over OTLP/HTTP as any collector does and hands each
batch to process_spans; this writes every span as one JSON line to the file
TETHER_SPANS_FILE names, for the test to read.
"""
import json
import os

OUT = os.environ["TETHER_SPANS_FILE"]


def _value(any_value):
    inner = getattr(any_value, "value", any_value)
    inner = getattr(inner, "value", inner)
    return inner if isinstance(inner, (str, int, float, bool)) else str(inner)


def process_spans(resource_spans):
    resource = resource_spans.resource
    attributes = resource.attributes if resource else []
    service = next((_value(kv.value) for kv in attributes if kv.key == "service.name"), None)
    with open(OUT, "a", encoding="utf-8") as out:
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                out.write(json.dumps({
                    "service": service,
                    "trace_id": bytes(span.trace_id).hex(),
                    "span_id": bytes(span.span_id).hex(),
                    "parent_span_id": bytes(span.parent_span_id).hex(),
                    "name": span.name,
                    "kind": int(span.kind),
                    "attributes": {kv.key: _value(kv.value) for kv in span.attributes},
                }) + "\n")
