//! The server's process: who owns it (reaping, stopping with a grace
//! period, then a kill) and its stderr, logged line by line under the
//! `mcp_server` target.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Child;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use tether_counters::fallback;

use super::{Exit, SERVER_TARGET, STOP_GRACE};
use crate::counters::BridgeCounters;

/// Longest stderr line logged as is; the rest of the line is cut (counted).
const MAX_STDERR_LINE: usize = 4096;

/// Waits until the process has ended; how it ended.
pub(super) async fn wait_exit(exit: &mut watch::Receiver<Option<Exit>>) -> Exit {
    let unknown = Exit { status: None, after_stream_closed: false };
    match exit.wait_for(Option::is_some).await {
        Ok(e) => e.clone().unwrap_or(unknown),
        Err(_) => unknown,
    }
}

/// Owns the child process: publishes how it ended, and ends it when asked.
pub(super) async fn reap(
    mut child: Child,
    stop: CancellationToken,
    exit: watch::Sender<Option<Exit>>,
    stream_closed: Arc<AtomicBool>,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        _ = stop.cancelled() => match tokio::time::timeout(STOP_GRACE, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                if let Err(e) = child.kill().await {
                    warn!(error = %e, "could not kill the MCP server");
                }
                child.wait().await
            }
        },
    };
    let status = match status {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(error = %e, "could not read the MCP server's exit status");
            None
        }
    };
    exit.send_replace(Some(Exit { status, after_stream_closed: stream_closed.load(Ordering::Relaxed) }));
}

/// Logs the server's stderr line by line under [`SERVER_TARGET`].
pub(super) async fn pump_stderr<R: AsyncRead + Unpin>(
    stderr: R,
    name: Arc<str>,
    pid: Option<u32>,
    counters: Arc<BridgeCounters>,
) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut cut = false;
    let emit = |line: &[u8], cut: bool| {
        BridgeCounters::bump(&counters.server_stderr_lines);
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches('\r');
        if cut {
            fallback!(counters.server_stderr_lines_truncated, info, target: SERVER_TARGET, server = %name, pid, truncated = cut, "{text}");
        } else {
            info!(target: SERVER_TARGET, server = %name, pid, truncated = cut, "{text}");
        }
    };
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) => buf,
            Err(e) => {
                debug!(server = %name, error = %e, "server stderr read failed");
                break;
            }
        };
        if buf.is_empty() {
            if !line.is_empty() {
                emit(&line, cut);
            }
            break;
        }
        let newline = buf.iter().position(|b| *b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        let room = MAX_STDERR_LINE.saturating_sub(line.len());
        cut |= chunk.len() > room;
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let consumed = newline.map_or(buf.len(), |i| i + 1);
        reader.consume(consumed);
        if newline.is_some() {
            emit(&line, cut);
            line.clear();
            cut = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stderr_is_logged_line_by_line_and_long_lines_are_cut() {
        let counters = Arc::new(BridgeCounters::default());
        let long = "x".repeat(MAX_STDERR_LINE + 10);
        let input = format!("one\r\ntwo\n{long}\nlast-without-newline");
        pump_stderr(input.as_bytes(), Arc::from("t"), None, Arc::clone(&counters)).await;
        assert_eq!(counters.get("server_stderr_lines"), 4);
        assert_eq!(counters.get("server_stderr_lines_truncated"), 1);
    }
}
