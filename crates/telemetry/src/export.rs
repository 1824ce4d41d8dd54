//! The OTLP exporter: on only when an endpoint is configured, and never in a
//! call's way.
//!
//! Spans leave through OpenTelemetry's batch processor on its own thread.
//! That processor drops spans silently when its queue is full, so a gate in
//! front of it ([`Gated`]) admits a span only while fewer than the queue's
//! size wait for the exporter, and counts every span it turns away: a
//! collector that is down or slow costs the calls nothing, and the operator
//! sees `tether_trace_spans_dropped_total` climb.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::Context;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use tether_counters::fallback;
use tracing::Subscriber;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::TARGET;

tether_counters::counters! {
    /// The trace exporter's counters (`tether_trace_*_total`).
    pub struct TraceCounters;
    events {
        /// Spans handed to the OTLP exporter.
        spans_exported,
    }
    fallbacks {
        /// Spans not exported because the exporter's queue was full (collector down or slow); the call went on.
        spans_dropped,
        /// Batches of spans the collector did not accept (unreachable, timed out, refused).
        export_failures,
    }
}

/// Spans that may wait for the exporter before new ones are dropped.
pub const DEFAULT_QUEUE: usize = 2048;
/// How long one export may take before it fails (and the next batch is tried).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the process waits at exit for the last spans to leave.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

/// Where traces go (`[telemetry]`, `OTEL_EXPORTER_OTLP_ENDPOINT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); `/v1/traces`
    /// is added as the OTLP spec adds it to `OTEL_EXPORTER_OTLP_ENDPOINT`. None: off.
    pub otlp_endpoint: Option<String>,
    /// `service.name` on every span.
    pub service_name: String,
    /// Spans that may wait for the exporter ([`DEFAULT_QUEUE`]).
    pub queue: usize,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig { otlp_endpoint: None, service_name: "tether".into(), queue: DEFAULT_QUEUE }
    }
}

impl TelemetryConfig {
    /// The URL spans are posted to.
    pub fn traces_url(&self) -> Option<String> {
        let base = self.otlp_endpoint.as_deref()?.trim_end_matches('/');
        Some(if base.ends_with("/v1/traces") { base.to_owned() } else { format!("{base}/v1/traces") })
    }
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The endpoint is not an `http://` or `https://` URL.
    #[error("otlp_endpoint {0:?} is not an http:// or https:// URL")]
    Endpoint(String),
    /// OpenTelemetry's exporter refused its configuration.
    #[error("the OTLP exporter could not be built: {0}")]
    Build(String),
}

/// A running exporter: keep it for the life of the process; dropping it sends
/// what is queued (bounded by a short timeout).
#[derive(Debug)]
pub struct Exporting {
    provider: SdkTracerProvider,
    counters: Arc<TraceCounters>,
}

impl Exporting {
    /// The exporter's counters.
    pub fn counters(&self) -> &Arc<TraceCounters> {
        &self.counters
    }
}

impl Drop for Exporting {
    fn drop(&mut self) {
        // At exit: a collector that is down must not hold the process.
        let _ = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
    }
}

/// A `tracing` layer that exports the spans of [`TARGET`] over OTLP, with its
/// guard; None when no endpoint is configured (tracing is off).
pub type TraceLayer<S> = Box<dyn Layer<S> + Send + Sync>;

/// Starts the exporter when `config` names an endpoint.
pub fn start<S>(config: &TelemetryConfig) -> Result<Option<(TraceLayer<S>, Exporting)>, TelemetryError>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let Some(url) = config.traces_url() else { return Ok(None) };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(TelemetryError::Endpoint(url));
    }
    // reqwest needs a process-wide TLS provider (an https:// collector); one already installed stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let otlp = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| TelemetryError::Build(e.to_string()))?;
    let counters = Arc::new(TraceCounters::default());
    let flow = Arc::new(Flow { capacity: config.queue.max(1) as u64, ..Flow::default() });
    let exporter = Counted { inner: otlp, flow: Arc::clone(&flow), counters: Arc::clone(&counters) };
    let batch = BatchSpanProcessor::builder(exporter)
        // Room above the gate's capacity: the gate's count and the queue's are never exactly in step.
        .with_batch_config(
            BatchConfigBuilder::default().with_max_queue_size(config.queue.max(1) + 256).build(),
        )
        .build();
    let processor = Gated { inner: batch, flow, counters: Arc::clone(&counters) };
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(Resource::builder_empty().with_service_name(config.service_name.clone()).build())
        .build();
    let tracer = provider.tracer("tether");
    // The conventions' attributes only: no source locations, threads, target or busy/idle times.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(Targets::new().with_target(TARGET, tracing::Level::TRACE))
        .boxed();
    Ok(Some((layer, Exporting { provider, counters })))
}

/// Spans admitted to the batch queue and spans the exporter has taken: their
/// difference is what waits.
#[derive(Debug, Default)]
struct Flow {
    admitted: AtomicU64,
    taken: AtomicU64,
    capacity: u64,
}

impl Flow {
    /// Admits one span unless `capacity` already wait.
    fn admit(&self) -> bool {
        let taken = self.taken.load(Ordering::Acquire);
        self.admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| {
                (a.saturating_sub(taken) < self.capacity).then_some(a + 1)
            })
            .is_ok()
    }
}

/// The batch processor behind a gate that counts what it turns away.
#[derive(Debug)]
struct Gated {
    inner: BatchSpanProcessor,
    flow: Arc<Flow>,
    counters: Arc<TraceCounters>,
}

impl SpanProcessor for Gated {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.flow.admit() {
            self.inner.on_end(span);
        } else {
            fallback!(self.counters.spans_dropped, debug, span = %span.name, "span dropped: the OTLP exporter's queue is full");
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting what it takes and what the collector refuses.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    flow: Arc<Flow>,
    counters: Arc<TraceCounters>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        self.flow.taken.fetch_add(n, Ordering::AcqRel);
        self.counters.spans_exported.inc_by(n);
        let outcome = self.inner.export(batch).await;
        if let Err(e) = &outcome {
            fallback!(self.counters.export_failures, warn, spans = n, error = %e, "spans not exported: the OTLP collector did not accept them");
        }
        outcome
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_admits_up_to_its_capacity_and_again_once_the_exporter_takes_some() {
        let flow = Flow { capacity: 3, ..Flow::default() };
        assert!((0..3).all(|_| flow.admit()));
        assert!(!flow.admit(), "a fourth waiting span is turned away");
        flow.taken.fetch_add(2, Ordering::AcqRel);
        assert!(flow.admit() && flow.admit());
        assert!(!flow.admit());
    }

    #[test]
    fn a_collector_that_is_down_costs_spans_not_calls_and_both_are_counted() {
        use tracing_subscriber::layer::SubscriberExt;
        // Nothing listens on port 9 of loopback here: every export is refused.
        let config = TelemetryConfig {
            otlp_endpoint: Some("http://127.0.0.1:9".into()),
            queue: 4,
            ..TelemetryConfig::default()
        };
        let (layer, exporting) = start::<tracing_subscriber::Registry>(&config).unwrap().unwrap();
        let counters = Arc::clone(exporting.counters());
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            for _ in 0..200 {
                let span = crate::leg(crate::Kind::Server, "tools/call", "client__a", "edge");
                span.in_scope(|| {});
            }
        });
        assert!(
            counters.get("spans_dropped") > 0,
            "a full queue turns spans away: {:?}",
            counters.snapshot()
        );
        assert!(counters.get("spans_dropped") <= 200);
        // At shutdown the queued spans are tried once more, and refused.
        drop(exporting);
        assert!(counters.get("export_failures") >= 1, "{:?}", counters.snapshot());
        assert!(counters.get("spans_exported") >= 1, "spans reached the exporter: {:?}", counters.snapshot());
    }

    #[test]
    fn the_traces_url_is_the_base_plus_v1_traces_once() {
        let at = |e: &str| TelemetryConfig { otlp_endpoint: Some(e.into()), ..TelemetryConfig::default() };
        assert_eq!(at("http://c:4318").traces_url().as_deref(), Some("http://c:4318/v1/traces"));
        assert_eq!(at("http://c:4318/").traces_url().as_deref(), Some("http://c:4318/v1/traces"));
        assert_eq!(at("http://c:4318/v1/traces").traces_url().as_deref(), Some("http://c:4318/v1/traces"));
        assert_eq!(TelemetryConfig::default().traces_url(), None);
    }
}
