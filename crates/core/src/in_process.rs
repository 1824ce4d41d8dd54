//! The edge's end of a backend link inside one process (`tether serve`'s
//! `/mcp`): the link's requests as a stream of frames, and a sink whose
//! frames complete the link's waiting calls as they are written.
//!
//! The edge serves a link through a frame sink and stream, so it serves this
//! end as it serves a socket, and neither crate names the other. A call
//! costs no WebSocket framing or copy of its frames, and no hop through a
//! link writer or reader task.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{Sink, Stream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::link::{close_reason, Inner, Notification};

/// The edge's end of [`crate::BackendLink::in_process`]: serve `requests`, write to `answers`.
#[derive(Debug)]
pub struct EdgeEnd {
    /// What the link asks the edge, in order; a dropped link sends a close.
    pub requests: Requests,
    /// Where the edge writes answers, progress and events.
    pub answers: Answers,
}

impl EdgeEnd {
    pub(crate) fn new(
        inner: Arc<Inner>,
        queue: mpsc::Receiver<Message>,
        notify: mpsc::Sender<Notification>,
    ) -> EdgeEnd {
        EdgeEnd { requests: Requests { queue }, answers: Answers { inner, notify, closed: false } }
    }
}

/// The link's requests as the edge reads frames from a socket.
#[derive(Debug)]
pub struct Requests {
    queue: mpsc::Receiver<Message>,
}

impl Stream for Requests {
    type Item = Result<Message, WsError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.queue.poll_recv(cx).map(|frame| frame.map(Ok))
    }
}

/// Frames from the edge, delivered to the link the moment they are written.
///
/// Never full: an answer completes its call at once, and a notification the
/// application is not reading is dropped, counted, as from a socket. Closing
/// it, or dropping it, closes the link: calls in flight fail `channel_closed`.
#[derive(Debug)]
pub struct Answers {
    inner: Arc<Inner>,
    notify: mpsc::Sender<Notification>,
    closed: bool,
}

impl Answers {
    fn close_with(&mut self, reason: &str) {
        if !self.closed {
            self.closed = true;
            self.inner.latch(reason);
        }
    }
}

impl Sink<Message> for Answers {
    type Error = WsError;

    fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        Poll::Ready(if self.closed { Err(WsError::AlreadyClosed) } else { Ok(()) })
    }

    fn start_send(mut self: Pin<&mut Self>, frame: Message) -> Result<(), WsError> {
        if self.closed {
            return Err(WsError::AlreadyClosed);
        }
        match frame {
            Message::Text(text) => self.inner.receive(text.as_str(), &self.notify),
            Message::Close(frame) => self.close_with(&close_reason(frame)),
            _ => {}
        }
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        self.close_with("edge closed the link");
        Poll::Ready(Ok(()))
    }
}

impl Drop for Answers {
    fn drop(&mut self) {
        self.close_with("edge connection lost");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::{SinkExt, StreamExt};
    use serde_json::{json, Value};
    use tether_contract::{ErrorKind, Leg};

    use super::*;
    use crate::BackendLink;

    const BUDGET: Duration = Duration::from_secs(60);

    /// The id of the next request the edge reads off the link.
    async fn next_id(requests: &mut Requests) -> Value {
        let Some(Ok(Message::Text(text))) = requests.next().await else { panic!("no request") };
        let frame: Value = serde_json::from_str(text.as_str()).unwrap();
        frame["id"].clone()
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_written_by_the_edge_completes_its_call() {
        let (link, EdgeEnd { mut requests, mut answers }) = BackendLink::in_process();
        let call = tokio::spawn(async move { link.request("ping", json!({}), Leg::TurnStart, BUDGET).await });
        let id = next_id(&mut requests).await;
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"pong": true}});
        answers.send(Message::text(answer.to_string())).await.unwrap();
        assert_eq!(call.await.unwrap().unwrap(), json!({"pong": true}));
    }

    #[tokio::test(start_paused = true)]
    async fn an_edge_end_that_goes_away_fails_calls_in_flight_at_once() {
        let (link, EdgeEnd { mut requests, answers }) = BackendLink::in_process();
        let link = Arc::new(link);
        let asking = Arc::clone(&link);
        let call =
            tokio::spawn(async move { asking.request("ping", json!({}), Leg::TurnStart, BUDGET).await });
        next_id(&mut requests).await;
        let started = tokio::time::Instant::now();
        drop(answers);
        let err = call.await.unwrap().unwrap_err();
        assert_eq!(err.kind, ErrorKind::ChannelClosed, "{err:?}");
        assert!(started.elapsed() < BUDGET, "the call waited for its budget");
        assert!(link.is_closed());
    }
}
