//! Plain HTTP on the WebSocket port: `/healthz`, `/readyz`, `/metrics`.
//!
//! The edge reads the request head itself (under the handshake deadline, which
//! also bounds slowloris peers). Probe paths get a tiny HTTP/1.1 answer; every
//! other request is handed to the WebSocket upgrade through [`Rewind`], which
//! replays the bytes already read.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::hub::Hub;

/// Largest request head the edge reads before giving up on a peer.
pub const MAX_HEAD: usize = 8 * 1024;

/// A probe path served without an upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Process alive.
    Healthz,
    /// Accepting work (false while draining).
    Readyz,
    /// Prometheus exposition.
    Metrics,
}

/// Reads until the end of the request head (or `MAX_HEAD`, or EOF).
pub async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(head);
        }
        head.extend_from_slice(&chunk[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.len() >= MAX_HEAD {
            return Ok(head);
        }
    }
}

/// Which probe a request head asks for, if any.
pub fn probe_of(head: &[u8]) -> Option<Probe> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?, parts.next()?);
    if method != "GET" {
        return None;
    }
    match target.split('?').next()? {
        "/healthz" => Some(Probe::Healthz),
        "/readyz" => Some(Probe::Readyz),
        "/metrics" => Some(Probe::Metrics),
        _ => None,
    }
}

/// Whether a request head asks for a WebSocket upgrade.
pub fn is_upgrade(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    text.lines().any(|l| l.starts_with("upgrade:") && l.contains("websocket"))
}

/// Answers a plain request that is neither a probe nor an upgrade.
pub async fn not_found<S: AsyncWrite + Unpin>(stream: &mut S) -> std::io::Result<()> {
    let body = "not found: WebSocket endpoints are /v1/client and /v1/backend; probes are /healthz, /readyz, /metrics\n";
    let response = format!(
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// Answers a probe and closes.
pub async fn answer<S: AsyncWrite + Unpin>(stream: &mut S, probe: Probe, hub: &Hub) -> std::io::Result<()> {
    let (status, content_type, body) = match probe {
        Probe::Healthz => ("200 OK", "text/plain; charset=utf-8", "ok\n".to_owned()),
        Probe::Readyz if hub.is_draining() => {
            ("503 Service Unavailable", "text/plain; charset=utf-8", "draining\n".to_owned())
        }
        Probe::Readyz => ("200 OK", "text/plain; charset=utf-8", "ready\n".to_owned()),
        Probe::Metrics => {
            ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", hub.metrics.render())
        }
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// A stream that first replays bytes already read, then reads the inner stream.
#[derive(Debug)]
pub struct Rewind<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S> Rewind<S> {
    /// Replays `prefix` before `inner`.
    pub fn new(prefix: Vec<u8>, inner: S) -> Self {
        Rewind { prefix, pos: 0, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.prefix[start..start + n]);
            self.pos += n;
            if self.pos == self.prefix.len() {
                self.prefix = Vec::new();
                self.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_recognised_by_exact_path() {
        let cases: &[(&str, Option<Probe>)] = &[
            ("GET /healthz HTTP/1.1\r\n\r\n", Some(Probe::Healthz)),
            ("GET /readyz?verbose=1 HTTP/1.1\r\n\r\n", Some(Probe::Readyz)),
            ("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Some(Probe::Metrics)),
            ("GET /v1/client HTTP/1.1\r\n\r\n", None),
            ("POST /metrics HTTP/1.1\r\n\r\n", None),
            ("GET /metricsx HTTP/1.1\r\n\r\n", None),
            ("\u{0}\u{1}", None),
            ("", None),
        ];
        for (head, want) in cases {
            assert_eq!(probe_of(head.as_bytes()), *want, "{head:?}");
        }
    }

    #[tokio::test]
    async fn rewind_replays_then_reads_on() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b" world").await.unwrap();
        drop(a);
        let mut r = Rewind::new(b"hello".to_vec(), b);
        let mut out = String::new();
        r.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
