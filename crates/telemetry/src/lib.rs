//! Traces across a call: W3C trace context in and out of every hop, and spans
//! exported over OTLP without ever slowing a call.
//!
//! A call's legs are `tracing` spans with target [`TARGET`], named and
//! attributed by OpenTelemetry's semantic conventions for MCP
//! (`tools/call {tool}`, `mcp.method.name`, `gen_ai.tool.name`, …). Only the
//! OTLP layer [`export::start`] builds reads that target: with export off no
//! layer wants the spans, so each is a disabled callsite and costs a branch.
//!
//! Each hop takes the caller's context with [`adopt`] and hands its own on
//! with [`carry`]. When nothing exports, [`carry`] leaves the caller's context
//! as it came: tether then forwards an agent's trace to the device unchanged,
//! as a W3C intermediary that does not participate must.

pub mod export;

use std::collections::HashMap;
use std::future::Future;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use tether_contract::backend::CallMeta;
use tether_contract::WireError;

pub use export::{start, Exporting, TelemetryConfig, TelemetryError, TraceCounters};

/// The target of every span that is a leg of a traced call.
pub const TARGET: &str = "tether::trace";

/// What a span stands for, as OpenTelemetry's span kind names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request this process answers (the MCP request, a call from a backend or another edge).
    Server,
    /// A request this process sends and waits on (to the edge, the holding edge, the device).
    Client,
    /// Work inside this process (a gate, a catalog re-read's bookkeeping).
    Internal,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Server => "server",
            Kind::Client => "client",
            Kind::Internal => "internal",
        }
    }
}

/// One leg of a call: `{operation} {tool}` (the conventions' `{mcp.method.name}
/// {target}`), with the MCP and GenAI tool attributes. `leg` names tether's
/// own part (`mcp`, `gate`, `edge`, `cluster_hop`, `device`, `reread`, …).
pub fn leg(kind: Kind, operation: &str, tool: &str, leg: &'static str) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "leg",
        otel.name = %format_args!("{operation} {tool}"),
        otel.kind = kind.as_str(),
        otel.status_code = tracing::field::Empty,
        mcp.method.name = operation,
        gen_ai.tool.name = tool,
        gen_ai.operation.name = "execute_tool",
        tether.leg = leg,
        tether.outcome = tracing::field::Empty,
        error.type = tracing::field::Empty,
        jsonrpc.request.id = tracing::field::Empty,
        mcp.session.id = tracing::field::Empty,
        mcp.protocol.version = tracing::field::Empty,
        tether.session = tracing::field::Empty,
        network.transport = tracing::field::Empty,
    );
    span
}

/// Records how a leg ended: `tether.outcome` always (`ok` or the error kind),
/// and on failure `error.type` with an error status, as the conventions ask.
pub fn outcome(span: &Span, failed: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    match failed {
        None => {
            span.record("tether.outcome", "ok");
        }
        Some(kind) => {
            span.record("tether.outcome", kind);
            span.record("error.type", kind);
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// [`outcome`] of a call's result: `ok`, or its error's kind.
pub fn ended<T>(span: &Span, result: &Result<T, WireError>) {
    outcome(span, result.as_ref().err().map(|e| e.kind.as_str()));
}

/// Runs `call` inside `span` and records how it ended there.
pub async fn run<T>(span: Span, call: impl Future<Output = Result<T, WireError>>) -> Result<T, WireError> {
    let result = call.instrument(span.clone()).await;
    ended(&span, &result);
    result
}

/// Makes `span` a child of the caller's W3C trace context; an absent or
/// malformed `traceparent` leaves it the root of a new trace.
pub fn adopt(span: &Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    let Some(traceparent) = traceparent else { return };
    if span.is_disabled() {
        return;
    }
    let carrier = Incoming { traceparent, tracestate };
    let parent = TraceContextPropagator::new().extract(&carrier);
    if parent.span().span_context().is_valid() {
        // Only fails when the span is already started or not ours: it stays a root.
        let _ = span.set_parent(parent);
    }
}

/// [`adopt`] for a call's `_meta`.
pub fn adopt_meta(span: &Span, meta: &CallMeta) {
    adopt(span, meta.traceparent.as_deref(), meta.tracestate.as_deref());
}

/// The W3C context of `span` when it is exported: `(traceparent, tracestate)`.
pub fn context_of(span: &Span) -> Option<(String, Option<String>)> {
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut out = Outgoing::default();
    TraceContextPropagator::new().inject_context(&context, &mut out);
    let traceparent = out.0.remove("traceparent")?;
    Some((traceparent, out.0.remove("tracestate").filter(|s| !s.is_empty())))
}

/// Hands `span`'s context on in a call's `_meta`; with nothing exported the
/// caller's context stays as it came (passed through).
pub fn carry(span: &Span, meta: &mut CallMeta) {
    if let Some((traceparent, tracestate)) = context_of(span) {
        meta.traceparent = Some(traceparent);
        meta.tracestate = tracestate;
    }
}

/// The context to hand on from `span`: its own when exported, else the
/// caller's `(traceparent, tracestate)` as they came.
pub fn onward(
    span: &Span,
    traceparent: Option<String>,
    tracestate: Option<String>,
) -> (Option<String>, Option<String>) {
    match context_of(span) {
        Some((traceparent, tracestate)) => (Some(traceparent), tracestate),
        None => (traceparent, tracestate),
    }
}

/// A trace context read from where a request carried it.
struct Incoming<'a> {
    traceparent: &'a str,
    tracestate: Option<&'a str>,
}

impl Extractor for Incoming<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(self.traceparent),
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

#[derive(Default)]
struct Outgoing(HashMap<String, String>);

impl Injector for Outgoing {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer as _;

    const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn an_exported_leg_joins_the_callers_trace_and_hands_on_its_own_span() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test")).with_filter(
            tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE),
        );
        let subscriber = tracing_subscriber::registry().with(layer);
        let mut meta = CallMeta { traceparent: Some(CALLER.into()), ..CallMeta::default() };
        tracing::subscriber::with_default(subscriber, || {
            let span = leg(Kind::Server, "tools/call", "client__a", "edge");
            adopt_meta(&span, &meta);
            carry(&span, &mut meta);
            outcome(&span, Some("timeout"));
        });
        let onward = meta.traceparent.expect("the leg's own context");
        assert!(onward.starts_with("00-0af7651916cd43dd8448eb211c80319c-"), "same trace: {onward}");
        assert_ne!(onward, CALLER, "a span of its own");
        let spans = exporter.get_finished_spans().unwrap();
        assert_eq!(spans.len(), 1);
        let span = &spans[0];
        assert_eq!(span.name, "tools/call client__a");
        assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Server);
        assert_eq!(span.parent_span_id.to_string(), "b7ad6b7169203331");
        let attr =
            |k: &str| span.attributes.iter().find(|kv| kv.key.as_str() == k).map(|kv| kv.value.to_string());
        assert_eq!(attr("gen_ai.tool.name").as_deref(), Some("client__a"));
        assert_eq!(attr("mcp.method.name").as_deref(), Some("tools/call"));
        assert_eq!(attr("error.type").as_deref(), Some("timeout"));
    }

    #[test]
    fn with_nothing_exporting_the_callers_context_passes_through_unchanged() {
        // As the binary logs with export off: a log layer whose filter refuses the legs.
        let off = tracing_subscriber::filter::Targets::new()
            .with_default(tracing::Level::TRACE)
            .with_target(TARGET, tracing::level_filters::LevelFilter::OFF);
        let logs = tracing_subscriber::layer::Identity::new().with_filter(off);
        let mut meta = CallMeta {
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            ..CallMeta::default()
        };
        tracing::subscriber::with_default(tracing_subscriber::registry().with(logs), || {
            // (Not asserted disabled: tracing caches a callsite's interest
            // across the threads of concurrent tests with other subscribers.)
            let span = leg(Kind::Server, "tools/call", "client__a", "edge");
            adopt_meta(&span, &meta);
            carry(&span, &mut meta);
        });
        assert_eq!(
            meta.traceparent.as_deref(),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
    }
}
